package deploy

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"

	"github.com/walpost/walpost/config"
)

var update = flag.Bool("update", false, "rewrite deploy/kubernetes/walpost.yaml from the chart")

// render is `helm template walpost deploy/helm/walpost` with extra values.
func render(t *testing.T, vals map[string]any) map[string]string {
	t.Helper()
	ch, err := loader.Load("helm/walpost")
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Validate(); err != nil {
		t.Fatal(err)
	}
	v, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "walpost", Namespace: "walpost", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(ch, v)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	res := map[string]string{}
	for name, body := range out {
		if strings.HasSuffix(name, ".yaml") && strings.TrimSpace(body) != "" {
			res[filepath.Base(name)] = body
		}
	}
	return res
}

// strict decodes a manifest into its typed Kubernetes object, refusing
// unknown fields: the API's own Go types as the schema.
func strict(t *testing.T, name, body string, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(body), into); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, body)
	}
}

// TestChartRenders: the chart renders with its defaults into a Deployment
// of two replicas that a rolling update can replace (maxUnavailable 0,
// maxSurge 1, a standby is ready), a PodDisruptionBudget, a Service; the
// configuration reaches walpost as WALPOST_* variables that are config
// keys and pass validation, the secrets as files.
func TestChartRenders(t *testing.T) {
	out := render(t, map[string]any{
		"config":  map[string]any{"kafka.brokers": "kafka-0.kafka:9092,kafka-1.kafka:9092", "kafka.topic": "orders"},
		"secrets": map[string]any{"create": true, "postgresURL": "postgres://walpost:pw@db:5432/app", "kafkaSASLPassword": ""},
	})
	var dep appsv1.Deployment
	strict(t, "deployment.yaml", out["deployment.yaml"], &dep)
	if got := *dep.Spec.Replicas; got != 2 {
		t.Errorf("replicas %d, want 2 (one streams, one stands by)", got)
	}
	ru := dep.Spec.Strategy.RollingUpdate
	if dep.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil ||
		*ru.MaxUnavailable != intstr.FromInt32(0) || *ru.MaxSurge != intstr.FromInt32(1) {
		t.Errorf("strategy %+v, want RollingUpdate maxUnavailable 0 maxSurge 1", dep.Spec.Strategy)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v, want /readyz (200 for a standby)", c.ReadinessProbe)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v, want /healthz", c.LivenessProbe)
	}
	if r := c.Resources.Requests; r.Memory().Value() < 64<<20 || r.Cpu().MilliValue() > 1000 {
		t.Errorf("requests %v: want at least the benchmark's ~60 MiB and under a core", r)
	}
	sc := dep.Spec.Template.Spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("pod security context %+v, want runAsNonRoot", sc)
	}
	known := map[string]bool{}
	for _, k := range config.Keys() {
		known[k.Env] = true
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "WALPOST_") && !known[e.Name] {
			t.Errorf("env %s is no config key's variable", e.Name)
		}
		if e.ValueFrom != nil {
			t.Errorf("env %s from %v: secrets come as files", e.Name, e.ValueFrom)
		}
		env[e.Name] = e.Value
	}
	if env["WALPOST_KAFKA_BROKERS"] != "kafka-0.kafka:9092,kafka-1.kafka:9092" || env["WALPOST_KAFKA_TOPIC"] != "orders" {
		t.Errorf("config values not passed as WALPOST_*: %v", env)
	}
	if env["WALPOST_POSTGRES_URL"] != "" || !strings.HasPrefix(env["WALPOST_POSTGRES_URL_FILE"], "/") {
		t.Errorf("postgres.url must come from the Secret as a file: %v", env)
	}
	for _, s := range []string{"pw@", "postgres://walpost"} {
		if strings.Contains(out["deployment.yaml"], s) {
			t.Errorf("the Deployment carries the secret %q", s)
		}
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || strings.HasPrefix(env["WALPOST_POSTGRES_URL_FILE"], m.MountPath+"/")
	}
	if !mounted {
		t.Errorf("WALPOST_POSTGRES_URL_FILE=%s is under no volume mount %v", env["WALPOST_POSTGRES_URL_FILE"], c.VolumeMounts)
	}
	// The rendered environment validates as walpost would load it.
	for _, k := range config.Keys() {
		t.Setenv(k.Env, "")
		os.Unsetenv(k.Env)
	}
	secret := filepath.Join(t.TempDir(), "postgres-url")
	if err := os.WriteFile(secret, []byte("postgres://walpost:pw@db:5432/app\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for k, v := range env {
		if k == "WALPOST_POSTGRES_URL_FILE" {
			v = secret
		}
		t.Setenv(k, v)
	}
	if _, err := config.Load(nil, config.NeedAll); err != nil {
		t.Errorf("the chart's environment does not validate: %v", err)
	}

	var pdb policyv1.PodDisruptionBudget
	strict(t, "pdb.yaml", out["pdb.yaml"], &pdb)
	if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromInt32(1) {
		t.Errorf("PDB %+v, want maxUnavailable 1", pdb.Spec)
	}
	var sec corev1.Secret
	strict(t, "secret.yaml", out["secret.yaml"], &sec)
	var svc corev1.Service
	strict(t, "service.yaml", out["service.yaml"], &svc)
	if _, ok := out["servicemonitor.yaml"]; ok {
		t.Error("ServiceMonitor rendered although serviceMonitor.enabled is false")
	}
	if sm := render(t, map[string]any{"serviceMonitor": map[string]any{"enabled": true}})["servicemonitor.yaml"]; !strings.Contains(sm, "kind: ServiceMonitor") || !strings.Contains(sm, "path: /metrics") {
		t.Errorf("serviceMonitor.enabled renders %q", sm)
	}
}

// TestPlainManifests: deploy/kubernetes/walpost.yaml is the chart rendered
// with its defaults (go test -run TestPlainManifests -update rewrites it).
func TestPlainManifests(t *testing.T) {
	out := render(t, nil)
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	b.WriteString("# Rendered from deploy/helm/walpost with its default values (helm template walpost deploy/helm/walpost -n walpost);\n# deploy/helm_test.go checks it. Create the Secret walpost with the key postgres-url first.\n")
	for _, n := range names {
		b.WriteString("---\n" + strings.TrimSpace(out[n]) + "\n")
	}
	const path = "kubernetes/walpost.yaml"
	if *update {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, b.Bytes()) {
		t.Errorf("%s differs from the chart's rendering: go test ./deploy -run TestPlainManifests -update", path)
	}
	if slices.Contains(names, "secret.yaml") {
		t.Error("the default rendering creates a Secret: plain manifests must not carry a password")
	}
}
