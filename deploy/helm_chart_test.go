package deploy

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"

	"github.com/walpost/walpost/config"
)

const secretDir = "/etc/walpost/secrets/"

// renderRelease is `helm template <release> deploy/helm/walpost -f vals`,
// schema validation included; it returns the error Helm would print.
func renderRelease(release string, vals map[string]any) (map[string]string, error) {
	ch, err := loader.Load("helm/walpost")
	if err != nil {
		return nil, err
	}
	if err := ch.Validate(); err != nil {
		return nil, err
	}
	v, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: release, Namespace: "walpost", IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	out, err := engine.Render(ch, v)
	if err != nil {
		return nil, err
	}
	res := map[string]string{}
	for name, body := range out {
		if strings.TrimSpace(body) != "" {
			res[filepath.Base(name)] = body
		}
	}
	return res, nil
}

func yamlValues(t *testing.T, s string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte(s), &vals); err != nil {
		t.Fatalf("values %q: %v", s, err)
	}
	return vals
}

// rendered is one release, every manifest decoded strictly into its type.
type rendered struct {
	files      map[string]string
	dep        appsv1.Deployment
	c          corev1.Container
	env        map[string]corev1.EnvVar
	svc        corev1.Service
	pdb        *policyv1.PodDisruptionBudget
	secret     *corev1.Secret
	sa         *corev1.ServiceAccount
	rules      *rulefmt.RuleGroups
	monitor    bool
	secretKeys []string // the Secret volume's items, sorted
}

// crd is the part of a custom resource the chart writes; strict decoding
// checks its metadata, spec is checked on its own.
type crd struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       json.RawMessage   `json:"spec"`
}

func decodeRelease(t *testing.T, files map[string]string) *rendered {
	t.Helper()
	r := &rendered{files: files, env: map[string]corev1.EnvVar{}}
	for name, body := range files {
		switch name {
		case "NOTES.txt":
		case "deployment.yaml":
			strict(t, name, body, &r.dep)
		case "service.yaml":
			strict(t, name, body, &r.svc)
		case "pdb.yaml":
			r.pdb = &policyv1.PodDisruptionBudget{}
			strict(t, name, body, r.pdb)
		case "secret.yaml":
			r.secret = &corev1.Secret{}
			strict(t, name, body, r.secret)
		case "serviceaccount.yaml":
			r.sa = &corev1.ServiceAccount{}
			strict(t, name, body, r.sa)
		case "servicemonitor.yaml", "prometheusrule.yaml":
			var o crd
			strict(t, name, body, &o)
			if name == "servicemonitor.yaml" {
				r.monitor = o.Kind == "ServiceMonitor"
				continue
			}
			spec, err := yaml.JSONToYAML(o.Spec)
			if err != nil {
				t.Fatal(err)
			}
			groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
			if len(errs) > 0 {
				t.Fatalf("%s: %v", name, errs)
			}
			r.rules = groups
		default:
			t.Errorf("unexpected manifest %s", name)
		}
	}
	if n := len(r.dep.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%d containers, want walpost alone", n)
	}
	r.c = r.dep.Spec.Template.Spec.Containers[0]
	for _, e := range r.c.Env {
		if _, dup := r.env[e.Name]; dup {
			t.Errorf("env %s set twice", e.Name)
		}
		r.env[e.Name] = e
	}
	for _, v := range r.dep.Spec.Template.Spec.Volumes {
		if v.Name == "secrets" && v.Secret != nil {
			for _, it := range v.Secret.Items {
				r.secretKeys = append(r.secretKeys, it.Key)
			}
		}
	}
	sort.Strings(r.secretKeys)
	return r
}

// invariants hold for every rendering: names, labels, the port, the secret
// files and their volume items, the grace period, and the environment as
// walpost loads it.
func (r *rendered) invariants(t *testing.T, fullname string) {
	t.Helper()
	pod := r.dep.Spec.Template
	type object struct {
		kind string
		meta metav1.ObjectMeta
	}
	objs := []object{{"Deployment", r.dep.ObjectMeta}, {"Service", r.svc.ObjectMeta}}
	if r.pdb != nil {
		objs = append(objs, object{"PodDisruptionBudget", r.pdb.ObjectMeta})
	}
	if r.sa != nil {
		objs = append(objs, object{"ServiceAccount", r.sa.ObjectMeta})
	}
	for _, o := range objs {
		if o.meta.Name != fullname {
			t.Errorf("%s named %q, want %q", o.kind, o.meta.Name, fullname)
		}
	}
	if r.secret != nil {
		objs = append(objs, object{"Secret", r.secret.ObjectMeta})
	}
	objs = append(objs, object{"pod template", pod.ObjectMeta})
	for _, o := range objs {
		for _, l := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"} {
			if o.meta.Labels[l] == "" {
				t.Errorf("%s lacks the label %s: %v", o.kind, l, o.meta.Labels)
			}
		}
		if o.meta.Labels["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("%s: managed-by %q, want Helm", o.kind, o.meta.Labels["app.kubernetes.io/managed-by"])
		}
	}
	for k, v := range r.dep.Spec.Selector.MatchLabels {
		if pod.Labels[k] != v || r.svc.Spec.Selector[k] != v {
			t.Errorf("selector %s=%s: pod labels %v, Service selector %v", k, v, pod.Labels, r.svc.Spec.Selector)
		}
	}

	// The port: http.listen, the container port, the probes and the Service.
	if len(r.c.Ports) != 1 || r.c.Ports[0].Name != "http" {
		t.Fatalf("container ports %v, want one named http", r.c.Ports)
	}
	port := r.c.Ports[0].ContainerPort
	if got := r.env["WALPOST_HTTP_LISTEN"].Value; got != fmt.Sprintf(":%d", port) {
		t.Errorf("WALPOST_HTTP_LISTEN=%q, container port %d", got, port)
	}
	if sp := r.svc.Spec.Ports; len(sp) != 1 || sp[0].Port != port || sp[0].TargetPort.StrVal != "http" {
		t.Errorf("Service ports %v, want %d → http", sp, port)
	}
	for _, p := range []*corev1.Probe{r.c.ReadinessProbe, r.c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.StrVal != "http" {
			t.Errorf("probe %+v does not use the http port", p)
		}
	}

	// Every WALPOST_* variable is a config key; the chart's own carry no
	// secret value (only extraEnv may take one from a Secret, for AWS_*).
	keys := map[string]config.Key{}
	for _, k := range config.Keys() {
		keys[k.Env] = k
	}
	for name, e := range r.env {
		if !strings.HasPrefix(name, "WALPOST_") {
			continue
		}
		if _, ok := keys[name]; !ok {
			t.Errorf("env %s is no config key's variable", name)
		}
		if e.ValueFrom != nil {
			t.Errorf("env %s from %v: secrets come as files", name, e.ValueFrom)
		}
	}
	// Each *_FILE variable under the secrets mount has its volume item,
	// and each item its variable.
	var fromSecret []string
	for name, e := range r.env {
		if strings.HasSuffix(name, "_FILE") && strings.HasPrefix(e.Value, secretDir) {
			fromSecret = append(fromSecret, strings.TrimPrefix(e.Value, secretDir))
		}
	}
	sort.Strings(fromSecret)
	if !slices.Equal(fromSecret, r.secretKeys) {
		t.Errorf("secret files named by *_FILE %v, Secret volume items %v", fromSecret, r.secretKeys)
	}
	// Every path a *_file key names lies under a volume mount, and every
	// mount has its volume.
	vols := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = true
	}
	for _, m := range r.c.VolumeMounts {
		if !vols[m.Name] {
			t.Errorf("mount %s at %s has no volume", m.Name, m.MountPath)
		}
	}
	for name, e := range r.env {
		if !strings.HasPrefix(name, "WALPOST_") || !strings.HasSuffix(name, "_FILE") {
			continue
		}
		mounted := false
		for _, m := range r.c.VolumeMounts {
			mounted = mounted || strings.HasPrefix(e.Value, strings.TrimSuffix(m.MountPath, "/")+"/")
		}
		if !mounted {
			t.Errorf("%s=%s is under no volume mount", name, e.Value)
		}
	}
	if r.secret != nil {
		var have []string
		for k := range r.secret.StringData {
			have = append(have, k)
		}
		sort.Strings(have)
		if !slices.Equal(have, r.secretKeys) {
			t.Errorf("the chart's Secret holds %v, the pod mounts %v", have, r.secretKeys)
		}
	}

	// The kubelet's SIGKILL comes after walpost's clean stop.
	flush := 30 * time.Second
	for _, k := range config.Keys() {
		if k.Key == "kafka.flush_timeout" {
			d, err := time.ParseDuration(k.Default)
			if err != nil {
				t.Fatal(err)
			}
			flush = d
		}
	}
	if e, ok := r.env["WALPOST_KAFKA_FLUSH_TIMEOUT"]; ok {
		d, err := time.ParseDuration(e.Value)
		if err != nil {
			t.Fatal(err)
		}
		flush = d
	}
	grace := int64(-1)
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	if time.Duration(grace)*time.Second <= flush+15*time.Second {
		t.Errorf("terminationGracePeriodSeconds %d (-1: unset), want above kafka.flush_timeout %v + 15s", grace, flush)
	}

	// The environment validates as walpost loads it, each secret file
	// standing in a temporary directory.
	for _, k := range config.Keys() {
		t.Setenv(k.Env, "")
		os.Unsetenv(k.Env)
	}
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	dir := t.TempDir()
	for name, e := range r.env {
		v := e.Value
		if e.ValueFrom != nil {
			v = "from-a-secret"
		}
		if strings.HasSuffix(name, "_FILE") {
			f := filepath.Join(dir, path.Base(v))
			content := "secret\n"
			if name == "WALPOST_POSTGRES_URL_FILE" {
				content = "postgres://walpost:pw@db:5432/app\n"
			}
			if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			v = f
		}
		t.Setenv(name, v)
	}
	// EKS's pod identity webhook gives a pod of a ServiceAccount with a
	// role its web identity (IRSA).
	if r.sa != nil && r.sa.Annotations["eks.amazonaws.com/role-arn"] != "" {
		t.Setenv("AWS_ROLE_ARN", r.sa.Annotations["eks.amazonaws.com/role-arn"])
		t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/secrets/eks.amazonaws.com/serviceaccount/token")
	}
	if _, err := config.Load(nil, config.NeedAll); err != nil {
		t.Errorf("walpost refuses the rendered environment: %v", err)
	}
}

type chartCase struct {
	name     string
	release  string // "walpost" when empty
	values   string // YAML
	fullname string // the objects' name; "walpost" when empty
	wantErr  string // the rendering fails naming this
	check    func(t *testing.T, r *rendered)
}

func wantSecretFiles(t *testing.T, r *rendered, want ...string) {
	t.Helper()
	sort.Strings(want)
	if !slices.Equal(r.secretKeys, want) {
		t.Errorf("secret files %v, want %v", r.secretKeys, want)
	}
}

func wantNoEnv(t *testing.T, r *rendered, names ...string) {
	t.Helper()
	for _, n := range names {
		if e, ok := r.env[n]; ok {
			t.Errorf("%s=%q set", n, e.Value)
		}
	}
}

func wantEnv(t *testing.T, r *rendered, name, value string) {
	t.Helper()
	if got, ok := r.env[name]; !ok || got.Value != value {
		t.Errorf("%s=%q (set %v), want %q", name, got.Value, ok, value)
	}
}

var chartCases = []chartCase{
	{
		name:   "defaults",
		values: ``,
		check: func(t *testing.T, r *rendered) {
			wantSecretFiles(t, r, "postgres-url")
			wantEnv(t, r, "WALPOST_POSTGRES_URL_FILE", secretDir+"postgres-url")
			wantNoEnv(t, r, "WALPOST_KAFKA_SASL_PASSWORD_FILE", "WALPOST_KAFKA_SASL_OAUTH_TOKEN_FILE", "WALPOST_KAFKA_SASL_AWS_SECRET_ACCESS_KEY_FILE")
			spec := r.dep.Spec.Template.Spec
			if r.sa == nil || spec.ServiceAccountName != "walpost" || r.sa.AutomountServiceAccountToken == nil || *r.sa.AutomountServiceAccountToken ||
				spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
				t.Errorf("ServiceAccount %+v, pod's %q automount %v: want walpost's own, no token", r.sa, spec.ServiceAccountName, spec.AutomountServiceAccountToken)
			}
			a := spec.Affinity
			if a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
				a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
				t.Fatalf("affinity %+v, want one preferred pod anti-affinity term", a)
			}
			term := a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
			if term.TopologyKey != "kubernetes.io/hostname" || !reflect.DeepEqual(term.LabelSelector.MatchLabels, r.dep.Spec.Selector.MatchLabels) {
				t.Errorf("anti-affinity term %+v, want the replicas apart by host", term)
			}
			psc, sc := spec.SecurityContext, r.c.SecurityContext
			if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 65532 || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
				psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("pod securityContext %+v", psc)
			}
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("container securityContext %+v", sc)
			}
			if r.c.Ports[0].ContainerPort != 9187 {
				t.Errorf("port %d, want 9187", r.c.Ports[0].ContainerPort)
			}
			if r.secret != nil || r.monitor || r.rules != nil || spec.PriorityClassName != "" || spec.TopologySpreadConstraints != nil {
				t.Error("an opt-in object or setting is on by default")
			}
			if !strings.Contains(r.files["NOTES.txt"], "walpost check") {
				t.Errorf("NOTES.txt:\n%s", r.files["NOTES.txt"])
			}
		},
	},
	{
		name: "PLAIN, Secret from the values",
		values: `
config: {kafka.sasl.mechanism: PLAIN, kafka.sasl.username: walpost, kafka.tls.enabled: true}
secrets: {create: true, postgresURL: "postgres://walpost:pw@db:5432/app", kafkaSASLPassword: kpw}`,
		check: func(t *testing.T, r *rendered) {
			wantSecretFiles(t, r, "postgres-url", "kafka-sasl-password")
			wantEnv(t, r, "WALPOST_KAFKA_SASL_PASSWORD_FILE", secretDir+"kafka-sasl-password")
			wantEnv(t, r, "WALPOST_KAFKA_SASL_USERNAME", "walpost")
			wantNoEnv(t, r, "WALPOST_KAFKA_SASL_OAUTH_TOKEN_FILE", "WALPOST_KAFKA_SASL_AWS_SECRET_ACCESS_KEY_FILE")
			if r.secret == nil || r.secret.StringData["kafka-sasl-password"] != "kpw" || r.secret.Name != "walpost" {
				t.Errorf("Secret %+v", r.secret)
			}
			if r.dep.Spec.Template.Annotations["checksum/secret"] == "" {
				t.Error("no checksum/secret: a changed Secret would not roll the pods")
			}
			if strings.Contains(r.files["deployment.yaml"], "kpw") || strings.Contains(r.files["deployment.yaml"], "pw@") {
				t.Error("the Deployment carries a secret")
			}
		},
	},
	{
		name:   "SCRAM-SHA-256, lower case as walpost accepts it",
		values: `config: {kafka.sasl.mechanism: scram-sha-256, kafka.sasl.username: walpost}`,
		check: func(t *testing.T, r *rendered) {
			wantSecretFiles(t, r, "postgres-url", "kafka-sasl-password")
			wantNoEnv(t, r, "WALPOST_KAFKA_SASL_OAUTH_TOKEN_FILE", "WALPOST_KAFKA_SASL_AWS_SECRET_ACCESS_KEY_FILE")
		},
	},
	{
		name:   "SCRAM-SHA-512, an existing Secret",
		values: `{config: {kafka.sasl.mechanism: SCRAM-SHA-512, kafka.sasl.username: walpost}, secrets: {name: kafka-and-db}}`,
		check: func(t *testing.T, r *rendered) {
			wantSecretFiles(t, r, "postgres-url", "kafka-sasl-password")
			for _, v := range r.dep.Spec.Template.Spec.Volumes {
				if v.Name == "secrets" && v.Secret.SecretName != "kafka-and-db" {
					t.Errorf("secret volume from %q", v.Secret.SecretName)
				}
			}
			if r.secret != nil {
				t.Error("a Secret rendered without secrets.create")
			}
		},
	},
	{
		name: "OAUTHBEARER: a token file, no password file",
		values: `
config: {kafka.sasl.mechanism: OAUTHBEARER, kafka.tls.enabled: true}
secrets: {create: true, postgresURL: "postgres://walpost:pw@db/app", kafkaSASLOAuthToken: eyJ}`,
		check: func(t *testing.T, r *rendered) {
			wantSecretFiles(t, r, "postgres-url", "kafka-sasl-oauth-token")
			wantEnv(t, r, "WALPOST_KAFKA_SASL_OAUTH_TOKEN_FILE", secretDir+"kafka-sasl-oauth-token")
			wantNoEnv(t, r, "WALPOST_KAFKA_SASL_PASSWORD_FILE", "WALPOST_KAFKA_SASL_AWS_SECRET_ACCESS_KEY_FILE")
		},
	},
	{
		name: "OAUTHBEARER: a token file another container refreshes",
		values: `
config: {kafka.sasl.mechanism: OAUTHBEARER, kafka.sasl.oauth_token_file: /var/run/kafka-token/token}
extraVolumes: [{name: kafka-token, emptyDir: {medium: Memory}}]
extraVolumeMounts: [{name: kafka-token, mountPath: /var/run/kafka-token, readOnly: true}]`,
		check: func(t *testing.T, r *rendered) {
			wantSecretFiles(t, r, "postgres-url")
			wantEnv(t, r, "WALPOST_KAFKA_SASL_OAUTH_TOKEN_FILE", "/var/run/kafka-token/token")
			wantNoEnv(t, r, "WALPOST_KAFKA_SASL_PASSWORD_FILE")
		},
	},
	{
		name: "AWS_MSK_IAM: keys, the secret one from the Secret",
		values: `
config: {kafka.sasl.mechanism: AWS_MSK_IAM, kafka.tls.enabled: "true", kafka.sasl.aws_access_key_id: AKIAEXAMPLE,
  kafka.brokers: "b-1.orders.abc123.c2.kafka.eu-west-1.amazonaws.com:9098"}`,
		check: func(t *testing.T, r *rendered) {
			wantSecretFiles(t, r, "postgres-url", "kafka-sasl-aws-secret-access-key")
			wantEnv(t, r, "WALPOST_KAFKA_SASL_AWS_SECRET_ACCESS_KEY_FILE", secretDir+"kafka-sasl-aws-secret-access-key")
			wantEnv(t, r, "WALPOST_KAFKA_SASL_AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
			wantNoEnv(t, r, "WALPOST_KAFKA_SASL_PASSWORD_FILE", "WALPOST_KAFKA_SASL_OAUTH_TOKEN_FILE")
		},
	},
	{
		name: "AWS_MSK_IAM: AWS_* variables from a Secret, a ServiceAccount with annotations",
		values: `
config: {kafka.sasl.mechanism: AWS_MSK_IAM, kafka.tls.enabled: true}
extraEnv:
  - {name: AWS_ACCESS_KEY_ID, valueFrom: {secretKeyRef: {name: msk-user, key: id}}}
  - {name: AWS_SECRET_ACCESS_KEY, valueFrom: {secretKeyRef: {name: msk-user, key: secret}}}
  - {name: AWS_REGION, value: eu-west-1}
serviceAccount: {annotations: {eks.amazonaws.com/role-arn: "arn:aws:iam::123456789012:role/walpost"}}`,
		check: func(t *testing.T, r *rendered) {
			wantSecretFiles(t, r, "postgres-url")
			wantNoEnv(t, r, "WALPOST_KAFKA_SASL_PASSWORD_FILE", "WALPOST_KAFKA_SASL_OAUTH_TOKEN_FILE", "WALPOST_KAFKA_SASL_AWS_SECRET_ACCESS_KEY_FILE")
			if e := r.env["AWS_SECRET_ACCESS_KEY"]; e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "msk-user" {
				t.Errorf("AWS_SECRET_ACCESS_KEY %+v", e)
			}
			if r.sa == nil || r.sa.Annotations["eks.amazonaws.com/role-arn"] != "arn:aws:iam::123456789012:role/walpost" {
				t.Errorf("ServiceAccount %+v", r.sa)
			}
		},
	},
	{
		name: "AWS_MSK_IAM: the ServiceAccount's role only (IRSA)",
		values: `
config: {kafka.sasl.mechanism: AWS_MSK_IAM, kafka.tls.enabled: true}
serviceAccount: {annotations: {eks.amazonaws.com/role-arn: "arn:aws:iam::123456789012:role/walpost"}}`,
		check: func(t *testing.T, r *rendered) {
			wantNoEnv(t, r, "WALPOST_KAFKA_SASL_PASSWORD_FILE", "WALPOST_KAFKA_SASL_OAUTH_TOKEN_FILE", "WALPOST_KAFKA_SASL_AWS_SECRET_ACCESS_KEY_FILE", "AWS_ACCESS_KEY_ID")
			if r.sa == nil || r.sa.Annotations["eks.amazonaws.com/role-arn"] == "" {
				t.Errorf("ServiceAccount %+v, want the role annotation", r.sa)
			}
		},
	},
	{
		name: "TLS to Kafka and PostgreSQL with mounted files",
		values: `
config:
  kafka.tls.enabled: true
  kafka.tls.ca_file: /etc/walpost/kafka-tls/ca.crt
  kafka.tls.cert_file: /etc/walpost/kafka-tls/tls.crt
  kafka.tls.key_file: /etc/walpost/kafka-tls/tls.key
extraVolumes:
  - {name: kafka-tls, secret: {secretName: walpost-kafka-client}}
  - {name: postgres-ca, configMap: {name: postgres-ca}}
extraVolumeMounts:
  - {name: kafka-tls, mountPath: /etc/walpost/kafka-tls, readOnly: true}
  - {name: postgres-ca, mountPath: /etc/walpost/postgres-ca, readOnly: true}`,
		check: func(t *testing.T, r *rendered) {
			wantSecretFiles(t, r, "postgres-url")
			mounts := map[string]string{}
			for _, m := range r.c.VolumeMounts {
				mounts[m.Name] = m.MountPath
			}
			vols := map[string]corev1.Volume{}
			for _, v := range r.dep.Spec.Template.Spec.Volumes {
				vols[v.Name] = v
			}
			if mounts["kafka-tls"] != "/etc/walpost/kafka-tls" || vols["kafka-tls"].Secret == nil || vols["kafka-tls"].Secret.SecretName != "walpost-kafka-client" {
				t.Errorf("kafka-tls mount %q volume %+v", mounts["kafka-tls"], vols["kafka-tls"])
			}
			if mounts["postgres-ca"] != "/etc/walpost/postgres-ca" || vols["postgres-ca"].ConfigMap == nil {
				t.Errorf("postgres-ca (sslrootcert) mount %q volume %+v", mounts["postgres-ca"], vols["postgres-ca"])
			}
			for _, k := range []string{"CA", "CERT", "KEY"} {
				if v := r.env["WALPOST_KAFKA_TLS_"+k+"_FILE"].Value; !strings.HasPrefix(v, "/etc/walpost/kafka-tls/") {
					t.Errorf("WALPOST_KAFKA_TLS_%s_FILE=%q", k, v)
				}
			}
		},
	},
	{
		name:   "an existing ServiceAccount",
		values: `serviceAccount: {create: false, name: walpost-msk}`,
		check: func(t *testing.T, r *rendered) {
			if r.sa != nil || r.dep.Spec.Template.Spec.ServiceAccountName != "walpost-msk" {
				t.Errorf("ServiceAccount object %v, pod's %q", r.sa, r.dep.Spec.Template.Spec.ServiceAccountName)
			}
		},
	},
	{
		name:     "another release name and nameOverride",
		release:  "orders",
		values:   `nameOverride: outbox`,
		fullname: "orders-outbox",
		check: func(t *testing.T, r *rendered) {
			if got := r.dep.Spec.Selector.MatchLabels["app.kubernetes.io/name"]; got != "outbox" {
				t.Errorf("name label %q", got)
			}
			if r.dep.Spec.Template.Spec.ServiceAccountName != "orders-outbox" {
				t.Errorf("ServiceAccount %q", r.dep.Spec.Template.Spec.ServiceAccountName)
			}
			for _, v := range r.dep.Spec.Template.Spec.Volumes {
				if v.Name == "secrets" && v.Secret.SecretName != "orders-outbox" {
					t.Errorf("Secret %q, want the full name", v.Secret.SecretName)
				}
			}
		},
	},
	{
		name:     "fullnameOverride",
		release:  "prod",
		values:   `fullnameOverride: walpost-orders`,
		fullname: "walpost-orders",
	},
	{
		name: "OpenShift: no fixed UID, the pod still non-root",
		values: `
podSecurityContext: {runAsUser: null, runAsGroup: null}
podAnnotations: {openshift.io/scc: restricted-v2}`,
		check: func(t *testing.T, r *rendered) {
			psc := r.dep.Spec.Template.Spec.SecurityContext
			if psc == nil || psc.RunAsUser != nil || psc.RunAsGroup != nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
				t.Errorf("pod securityContext %+v, want no UID/GID, runAsNonRoot", psc)
			}
			if r.dep.Spec.Template.Annotations["openshift.io/scc"] != "restricted-v2" {
				t.Errorf("podAnnotations not rendered: %v", r.dep.Spec.Template.Annotations)
			}
		},
	},
	{
		name: "scheduling: hard anti-affinity, spread, priority",
		values: `
podAntiAffinity: hard
topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}]
priorityClassName: outbox-critical
nodeSelector: {kubernetes.io/arch: arm64}
tolerations: [{key: dedicated, operator: Equal, value: outbox, effect: NoSchedule}]`,
		check: func(t *testing.T, r *rendered) {
			spec := r.dep.Spec.Template.Spec
			if a := spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
				t.Errorf("affinity %+v, want a required anti-affinity", spec.Affinity)
			}
			if tsc := spec.TopologySpreadConstraints; len(tsc) != 1 || tsc[0].LabelSelector == nil ||
				!reflect.DeepEqual(tsc[0].LabelSelector.MatchLabels, r.dep.Spec.Selector.MatchLabels) {
				t.Errorf("topologySpreadConstraints %+v, want the release's labels as selector", tsc)
			}
			if spec.PriorityClassName != "outbox-critical" || spec.NodeSelector["kubernetes.io/arch"] != "arm64" || len(spec.Tolerations) != 1 {
				t.Errorf("priority %q nodeSelector %v tolerations %v", spec.PriorityClassName, spec.NodeSelector, spec.Tolerations)
			}
		},
	},
	{
		name:   "an affinity of one's own replaces the default",
		values: `{podAntiAffinity: "", affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [outbox]}]}]}}}}`,
		check: func(t *testing.T, r *rendered) {
			if a := r.dep.Spec.Template.Spec.Affinity; a == nil || a.PodAntiAffinity != nil || a.NodeAffinity == nil {
				t.Errorf("affinity %+v, want the node affinity alone", a)
			}
		},
	},
	{
		name: "port, extraEnvFrom, image digest, a longer flush",
		values: `
port: 8080
extraEnvFrom: [{configMapRef: {name: walpost-tuning}}]
extraEnv: [{name: GOMAXPROCS, value: "2"}]
image: {digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
imagePullSecrets: [{name: ghcr}]
config: {kafka.flush_timeout: 1m}
terminationGracePeriodSeconds: 90
readinessProbe: {periodSeconds: 5, timeoutSeconds: 2}`,
		check: func(t *testing.T, r *rendered) {
			if r.c.Ports[0].ContainerPort != 8080 {
				t.Errorf("port %d", r.c.Ports[0].ContainerPort)
			}
			if len(r.c.EnvFrom) != 1 || r.c.EnvFrom[0].ConfigMapRef == nil || r.c.EnvFrom[0].ConfigMapRef.Name != "walpost-tuning" {
				t.Errorf("envFrom %+v", r.c.EnvFrom)
			}
			if !strings.HasSuffix(r.c.Image, "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef") {
				t.Errorf("image %q", r.c.Image)
			}
			if p := r.c.ReadinessProbe; p.PeriodSeconds != 5 || p.TimeoutSeconds != 2 || p.HTTPGet.Path != "/readyz" {
				t.Errorf("readiness probe %+v, want every 5 s with a 2 s timeout on /readyz", p)
			}
			if ps := r.dep.Spec.Template.Spec.ImagePullSecrets; len(ps) != 1 || ps[0].Name != "ghcr" {
				t.Errorf("imagePullSecrets %v", ps)
			}
		},
	},
	{
		name:   "ServiceMonitor and PrometheusRule",
		values: `{serviceMonitor: {enabled: true}, prometheusRule: {enabled: true, labels: {release: prometheus}}}`,
		check: func(t *testing.T, r *rendered) {
			if !r.monitor {
				t.Error("no ServiceMonitor")
			}
			want, errs := rulefmt.ParseFile("prometheus/alerts.yml", false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if r.rules == nil || !reflect.DeepEqual(ruleNames(r.rules), ruleNames(want)) {
				t.Errorf("PrometheusRule groups %v, want deploy/prometheus/alerts.yml's %v", ruleNames(r.rules), ruleNames(want))
			}
		},
	},

	// Refused at install, as walpost would refuse them at start (or Helm
	// for the schema).
	{name: "schema: a typo at the top", values: `replicaCountt: 2`, wantErr: "replicaCountt"},
	{name: "schema: a typo in a config key", values: `config: {kafka.broker: "k:9092"}`, wantErr: "kafka.broker"},
	{name: "schema: a typo in a probe", values: `livenessProbe: {periodSecond: 5}`, wantErr: "periodSecond"},
	{name: "schema: a typo in serviceAccount", values: `serviceAccount: {annotation: {a: b}}`, wantErr: "annotation"},
	{name: "schema: a secret in config", values: `config: {postgres.url: "postgres://u:pw@db/app"}`, wantErr: "postgres.url"},
	{name: "schema: http.listen is port", values: `config: {http.listen: ":9000"}`, wantErr: "http.listen"},
	{name: "schema: a value walpost does not take", values: `config: {kafka.compression: brotli}`, wantErr: "kafka.compression"},
	{name: "schema: a SASL mechanism walpost does not have", values: `config: {kafka.sasl.mechanism: GSSAPI}`, wantErr: "kafka.sasl.mechanism"},
	{name: "SCRAM without a user", values: `config: {kafka.sasl.mechanism: SCRAM-SHA-512}`, wantErr: "kafka.sasl.username"},
	{name: "AWS_MSK_IAM without TLS", values: `config: {kafka.sasl.mechanism: AWS_MSK_IAM, kafka.sasl.aws_access_key_id: AKIA}`, wantErr: "kafka.tls.enabled"},
	{name: "AWS_MSK_IAM without keys or a role", values: `{config: {kafka.sasl.mechanism: AWS_MSK_IAM, kafka.tls.enabled: true}}`, wantErr: "eks.amazonaws.com/role-arn"},
	{name: "a created Secret without the SASL password", values: `{config: {kafka.sasl.mechanism: PLAIN, kafka.sasl.username: u}, secrets: {create: true, postgresURL: "postgres://db/app"}}`, wantErr: "secrets.kafkaSASLPassword"},
	{name: "a grace period at flush_timeout + 15s", values: `terminationGracePeriodSeconds: 45`, wantErr: "terminationGracePeriodSeconds"},
}

func ruleNames(g *rulefmt.RuleGroups) []string {
	if g == nil {
		return nil
	}
	var out []string
	for _, grp := range g.Groups {
		for _, r := range grp.Rules {
			out = append(out, grp.Name+"/"+r.Alert+r.Record)
		}
	}
	return out
}

// TestChartCombinations renders the chart with each case's values, decodes
// every manifest strictly into the Kubernetes API types, checks what holds
// for every rendering and then the case's own fields; the refused cases
// fail with an error naming what is wrong.
func TestChartCombinations(t *testing.T) {
	rendered := 0
	for _, tc := range chartCases {
		t.Run(tc.name, func(t *testing.T) {
			release := tc.release
			if release == "" {
				release = "walpost"
			}
			out, err := renderRelease(release, yamlValues(t, tc.values))
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("rendered, want an error naming %q", tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %q does not name %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := decodeRelease(t, out)
			fullname := tc.fullname
			if fullname == "" {
				fullname = "walpost"
			}
			r.invariants(t, fullname)
			if tc.check != nil {
				tc.check(t, r)
			}
			rendered++
		})
	}
	if rendered < 10 {
		t.Errorf("%d combinations rendered, want at least 10", rendered)
	}
	t.Logf("%d combinations rendered and decoded, %d refused", rendered, len(chartCases)-rendered)
}

// TestChartLint runs Helm's own lint (the code behind `helm lint`) with the
// defaults and with every combination's values: no message of any
// severity, INFO included. Chart.yaml's icon is docs/icon.svg of the
// repository, which must exist and be an SVG.
func TestChartLint(t *testing.T) {
	for _, tc := range chartCases {
		if tc.wantErr != "" {
			continue
		}
		l := lint.AllWithKubeVersion("helm/walpost", yamlValues(t, tc.values), "walpost", nil)
		for _, m := range l.Messages {
			t.Errorf("%s: %v", tc.name, m)
		}
	}
	ch, err := loader.Load("helm/walpost")
	if err != nil {
		t.Fatal(err)
	}
	const iconBase = "https://raw.githubusercontent.com/walpost/walpost/main/"
	icon, ok := strings.CutPrefix(ch.Metadata.Icon, iconBase)
	if !ok {
		t.Fatalf("Chart.yaml icon %q: want a file of the repository, %s<path>", ch.Metadata.Icon, iconBase)
	}
	b, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(icon)))
	if err != nil {
		t.Fatalf("Chart.yaml icon: %v", err)
	}
	var svg struct {
		XMLName xml.Name
	}
	if err := xml.Unmarshal(b, &svg); err != nil || svg.XMLName.Local != "svg" {
		t.Errorf("Chart.yaml icon %s: not an SVG document (%v, root %q)", icon, err, svg.XMLName.Local)
	}
	// And the lint sees a typo.
	l := lint.AllWithKubeVersion("helm/walpost", map[string]any{"replicaCountt": 2}, "walpost", nil)
	if l.HighestSeverity < support.ErrorSev {
		t.Errorf("helm lint passes replicaCountt: %v", l.Messages)
	}
}

// secretConfigKeys are the config keys values cannot set: the secrets come
// from the Secret as files, http.listen from port.
var secretConfigKeys = []string{"postgres.url", "kafka.sasl.password", "kafka.sasl.oauth_token", "kafka.sasl.aws_secret_access_key", "kafka.sasl.aws_session_token", "kafka.tls.key_password", "kafka.tls.keystore_password", "schema_registry.password", "http.listen"}

// TestChartSchemaConfigKeys: values.schema.json accepts under config
// exactly walpost's config keys but the secrets and http.listen, so a
// misspelt key fails `helm install` instead of walpost's start.
func TestChartSchemaConfigKeys(t *testing.T) {
	b, err := os.ReadFile("helm/walpost/values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Properties struct {
			Config struct {
				Properties map[string]struct {
					Description string   `json:"description"`
					Enum        []string `json:"enum"`
				} `json:"properties"`
				AdditionalProperties *bool `json:"additionalProperties"`
			} `json:"config"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, k := range config.Keys() {
		if !slices.Contains(secretConfigKeys, k.Key) {
			want = append(want, k.Key)
		}
	}
	if ap := s.Properties.Config.AdditionalProperties; ap == nil || *ap {
		t.Error("values.schema.json: config takes any key (additionalProperties is not false)")
	}
	var got []string
	for k := range s.Properties.Config.Properties {
		got = append(got, k)
	}
	for _, k := range want {
		if !slices.Contains(got, k) {
			t.Errorf("config key %s missing from values.schema.json (properties.config.properties)", k)
		}
	}
	for _, k := range got {
		if !slices.Contains(want, k) {
			t.Errorf("values.schema.json accepts %s under config: no config key, or one values must not set", k)
		}
	}
	// An enumerated key takes its values only (kafka.sasl.mechanism also
	// empty and in lower case, as walpost takes it).
	enums := config.Enumerations()
	for _, k := range want {
		allowed := enums[k]
		if k == "kafka.sasl.mechanism" {
			lower := []string{""}
			for _, m := range allowed {
				lower = append(lower, strings.ToLower(m))
			}
			allowed = append(allowed, lower...)
		}
		if got := s.Properties.Config.Properties[k].Enum; !reflectSameSet(got, allowed) {
			t.Errorf("values.schema.json: %s takes %q, walpost %q", k, got, allowed)
		}
	}
}

func reflectSameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	sort.Strings(a)
	sort.Strings(b)
	return slices.Equal(a, b)
}

// TestChartAlertsCopy: the chart's files/alerts.yml, which its
// PrometheusRule holds, is deploy/prometheus/alerts.yml (a chart carries
// no file outside its directory; go test -run TestChartAlertsCopy -update
// copies it).
func TestChartAlertsCopy(t *testing.T) {
	want, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	const copyPath = "helm/walpost/files/alerts.yml"
	if *update {
		if err := os.WriteFile(copyPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from prometheus/alerts.yml: cd deploy && go test -run TestChartAlertsCopy -update", copyPath)
	}
}
