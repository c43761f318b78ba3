package main

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/walpost/walpost/config"
)

// The container files cannot be run here (no Docker); these tests check what
// can be checked statically: docker-compose.yml only sets real WALPOST_*
// keys, with values that pass validation, and runs real subcommands; the
// Dockerfile is multi-stage, builds a static binary (CGO_ENABLED=0) and ends
// as a non-root user.

// composeFile is the part of the Compose specification the tests read.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Configs  map[string]struct {
		Content string `yaml:"content"`
	} `yaml:"configs"`
}

type composeService struct {
	Image       string           `yaml:"image"`
	Build       any              `yaml:"build"`
	Command     stringOrList     `yaml:"command"`
	Entrypoint  stringOrList     `yaml:"entrypoint"`
	Environment composeEnv       `yaml:"environment"`
	DependsOn   composeDependsOn `yaml:"depends_on"`
	Healthcheck *composeHealth   `yaml:"healthcheck"`
	Profiles    []string         `yaml:"profiles"`
	Restart     string           `yaml:"restart"`
	// StopGracePeriod is how long `docker compose stop` waits after
	// SIGTERM before SIGKILL ("" is Compose's default, 10s).
	StopGracePeriod string `yaml:"stop_grace_period"`
}

type composeHealth struct {
	Test    stringOrList `yaml:"test"`
	Disable bool         `yaml:"disable"`
}

// stringOrList is a Compose command: "a b c" or [a, b, c].
type stringOrList []string

func (s *stringOrList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*s = strings.Fields(n.Value)
		return nil
	case yaml.SequenceNode:
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		*s = l
		return nil
	}
	return fmt.Errorf("line %d: want a string or a list", n.Line)
}

// composeEnv is a Compose environment: a map or a list of KEY=VALUE.
type composeEnv map[string]string

func (e *composeEnv) UnmarshalYAML(n *yaml.Node) error {
	out := composeEnv{}
	switch n.Kind {
	case yaml.MappingNode:
		var m map[string]any
		if err := n.Decode(&m); err != nil {
			return err
		}
		for k, v := range m {
			if v == nil {
				out[k] = ""
			} else {
				out[k] = fmt.Sprint(v)
			}
		}
	case yaml.SequenceNode:
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		for _, kv := range l {
			k, v, _ := strings.Cut(kv, "=")
			out[k] = v
		}
	default:
		return fmt.Errorf("line %d: environment must be a map or a list", n.Line)
	}
	*e = out
	return nil
}

// composeDependsOn is a Compose depends_on: a list of services (condition
// service_started) or a map of service to condition.
type composeDependsOn map[string]string

func (d *composeDependsOn) UnmarshalYAML(n *yaml.Node) error {
	out := composeDependsOn{}
	switch n.Kind {
	case yaml.SequenceNode:
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		for _, s := range l {
			out[s] = "service_started"
		}
	case yaml.MappingNode:
		var m map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := n.Decode(&m); err != nil {
			return err
		}
		for s, c := range m {
			if c.Condition == "" {
				c.Condition = "service_started"
			}
			out[s] = c.Condition
		}
	default:
		return fmt.Errorf("line %d: depends_on must be a list or a map", n.Line)
	}
	*d = out
	return nil
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if len(c.Services) == 0 {
		t.Fatal("docker-compose.yml has no services")
	}
	return c
}

// isWalpost says whether a service runs the walpost image.
func (s composeService) isWalpost() bool {
	return s.Build != nil || strings.HasPrefix(s.Image, "walpost")
}

// args is what the container runs after the image's ENTRYPOINT ["walpost"].
func (s composeService) args() []string {
	if len(s.Entrypoint) > 0 {
		if s.Entrypoint[0] != "walpost" && s.Entrypoint[0] != "/usr/local/bin/walpost" {
			return nil
		}
		return append(s.Entrypoint[1:], s.Command...)
	}
	if len(s.Command) == 0 {
		return []string{"run"} // the image's CMD
	}
	return s.Command
}

func TestComposeWalpostVariablesAreConfigKeys(t *testing.T) {
	c := readCompose(t)
	known := map[string]bool{}
	for _, k := range config.Keys() {
		known[k.Env] = true
	}
	seen := 0
	for name, s := range c.Services {
		for k := range s.Environment {
			if !strings.HasPrefix(k, "WALPOST_") {
				continue
			}
			seen++
			if !known[k] {
				t.Errorf("service %s sets %s, which is not a config key (known: %s)", name, k, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
			}
		}
	}
	if seen == 0 {
		t.Fatal("no service sets a WALPOST_* variable")
	}
}

// TestComposeWalpostConfigValidates feeds each walpost service's variables
// to the real config loader: the set must pass Validate as the command
// would see it.
func TestComposeWalpostConfigValidates(t *testing.T) {
	c := readCompose(t)
	for name, s := range c.Services {
		if !s.isWalpost() {
			continue
		}
		t.Run(name, func(t *testing.T) {
			clearWalpostEnv(t)
			for k, v := range s.Environment {
				if strings.HasPrefix(k, "WALPOST_") {
					t.Setenv(k, v)
				}
			}
			cfg, err := loadConfigFor(testCommand(t), config.NeedAll)
			if err != nil {
				t.Fatalf("the variables of service %s do not validate: %v", name, err)
			}
			if s.args()[0] == "run" {
				eq(t, "log.format", cfg.Log.Format, "json")
				eq(t, "http.listen", cfg.HTTP.Listen, ":9187")
				if cfg.Kafka.CreateTopicPartitions < 1 {
					t.Errorf("kafka.create_topic_partitions = %d: Kafka has auto-create off, so walpost run must create its topic", cfg.Kafka.CreateTopicPartitions)
				}
			}
		})
	}
}

// stopAfterDrain is what a clean stop of walpost run may still take once
// its drain (kafka.flush_timeout in total) is over: the final status
// update to the slot and the end of COPY (5 s), the last write of
// walpost_position (5 s), and 5 s for closing the clients and exiting.
const stopAfterDrain = 15 * time.Second

// TestComposeStopGracePeriod: `docker compose stop` sends SIGTERM, then
// SIGKILL after stop_grace_period. A walpost run service must give a clean
// stop kafka.flush_timeout (as its variables set it, or the default) plus
// stopAfterDrain; a kill instead confirms nothing more, and every event not
// yet confirmed is sent again on restart.
func TestComposeStopGracePeriod(t *testing.T) {
	c := readCompose(t)
	seen := 0
	for name, s := range c.Services {
		if !s.isWalpost() || len(s.args()) == 0 || s.args()[0] != "run" {
			continue
		}
		seen++
		t.Run(name, func(t *testing.T) {
			clearWalpostEnv(t)
			for k, v := range s.Environment {
				if strings.HasPrefix(k, "WALPOST_") {
					t.Setenv(k, v)
				}
			}
			cfg, err := loadConfigFor(testCommand(t), config.NeedAll)
			if err != nil {
				t.Fatalf("the variables of service %s do not validate: %v", name, err)
			}
			grace := 10 * time.Second // Compose's default
			if s.StopGracePeriod != "" {
				if grace, err = time.ParseDuration(s.StopGracePeriod); err != nil {
					t.Fatalf("service %s: stop_grace_period %q: %v", name, s.StopGracePeriod, err)
				}
			}
			if need := cfg.Kafka.FlushTimeout + stopAfterDrain; grace <= need {
				t.Errorf("service %s: stop_grace_period %s, want above kafka.flush_timeout (%s) + %s = %s, or a stop becomes a kill",
					name, grace, cfg.Kafka.FlushTimeout, stopAfterDrain, need)
			}
		})
	}
	if seen == 0 {
		t.Fatal("no service runs `walpost run`")
	}
}

func TestComposeWalpostSubcommands(t *testing.T) {
	c := readCompose(t)
	known := map[string]bool{}
	for _, cmd := range newRootCommand().Commands() {
		known[cmd.Name()] = true
	}
	ran := map[string]string{}
	for name, s := range c.Services {
		if !s.isWalpost() {
			continue
		}
		args := s.args()
		if len(args) == 0 {
			t.Errorf("service %s runs the walpost image with entrypoint %v, not walpost", name, s.Entrypoint)
			continue
		}
		if !known[args[0]] {
			t.Errorf("service %s runs `walpost %s`: not a subcommand (known: %s)", name, strings.Join(args, " "), strings.Join(slices.Sorted(maps.Keys(known)), ", "))
			continue
		}
		// Flags must be real too: parse them with the command's flag set.
		root := newRootCommand()
		cmd, rest, err := root.Find(args)
		if err != nil {
			t.Errorf("service %s: %v", name, err)
			continue
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("service %s: walpost %s: %v", name, strings.Join(args, " "), err)
		}
		ran[args[0]] = name
	}
	for _, want := range []string{"migrate", "run"} {
		if ran[want] == "" {
			t.Errorf("no service runs `walpost %s`", want)
		}
	}
	if run, mig := ran["run"], ran["migrate"]; run != "" && mig != "" {
		if got := c.Services[run].DependsOn[mig]; got != "service_completed_successfully" {
			t.Errorf("service %s depends on %s with condition %q, want service_completed_successfully (run must start after the schema exists)", run, mig, got)
		}
		if r := c.Services[mig].Restart; r != "no" && r != "" {
			t.Errorf("one-shot service %s has restart %q", mig, r)
		}
	}
}

func TestComposeDependencies(t *testing.T) {
	c := readCompose(t)
	conditions := []string{"service_started", "service_healthy", "service_completed_successfully"}
	for name, s := range c.Services {
		for dep, cond := range s.DependsOn {
			target, ok := c.Services[dep]
			if !ok {
				t.Errorf("service %s depends on unknown service %s", name, dep)
				continue
			}
			if !slices.Contains(conditions, cond) {
				t.Errorf("service %s: depends_on %s has unknown condition %q", name, dep, cond)
			}
			if cond == "service_healthy" && (target.Healthcheck == nil || target.Healthcheck.Disable || len(target.Healthcheck.Test) == 0) {
				t.Errorf("service %s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
			}
			if len(s.Profiles) == 0 && len(target.Profiles) > 0 {
				t.Errorf("service %s (always on) depends on %s, which only runs under profiles %v", name, dep, target.Profiles)
			}
		}
	}
	for _, name := range []string{"postgres", "kafka", "walpost"} {
		s, ok := c.Services[name]
		if !ok {
			t.Errorf("no %s service", name)
			continue
		}
		if s.Healthcheck == nil || len(s.Healthcheck.Test) == 0 {
			t.Errorf("service %s has no healthcheck", name)
		}
	}
}

func TestComposeServers(t *testing.T) {
	c := readCompose(t)
	pg := c.Services["postgres"]
	if !strings.HasPrefix(pg.Image, "postgres:15") {
		t.Errorf("postgres image %q, want postgres:15", pg.Image)
	}
	cmd := strings.Join(pg.Command, " ")
	for _, want := range []string{"wal_level=logical", "max_replication_slots=", "max_wal_senders="} {
		if !strings.Contains(cmd, want) {
			t.Errorf("postgres command %q lacks %s", cmd, want)
		}
	}
	k := c.Services["kafka"]
	if k.Image != "apache/kafka:4.3.1" {
		t.Errorf("kafka image %q, want apache/kafka:4.3.1", k.Image)
	}
	for key, want := range map[string]string{
		"KAFKA_PROCESS_ROLES":                            "broker,controller",
		"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                "false",
		"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "1",
		"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
		"KAFKA_DEFAULT_REPLICATION_FACTOR":               "1",
	} {
		if got := k.Environment[key]; got != want {
			t.Errorf("kafka %s = %q, want %q", key, got, want)
		}
	}
	for _, key := range []string{"KAFKA_NODE_ID", "KAFKA_LISTENERS", "KAFKA_ADVERTISED_LISTENERS", "KAFKA_CONTROLLER_LISTENER_NAMES", "KAFKA_CONTROLLER_QUORUM_VOTERS", "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"} {
		if k.Environment[key] == "" {
			t.Errorf("kafka lacks %s", key)
		}
	}
	// The brokers walpost is given must be an advertised listener.
	adv := k.Environment["KAFKA_ADVERTISED_LISTENERS"]
	for name, s := range c.Services {
		if b := s.Environment["WALPOST_KAFKA_BROKERS"]; b != "" {
			for _, broker := range strings.Split(b, ",") {
				if !strings.Contains(adv, "://"+broker) {
					t.Errorf("service %s uses broker %s, which kafka does not advertise (%s)", name, broker, adv)
				}
			}
		}
	}
	p, ok := c.Services["prometheus"]
	if !ok {
		t.Fatal("no prometheus service")
	}
	if len(p.Profiles) == 0 {
		t.Error("prometheus is not optional: give it a profile")
	}
	if !strings.Contains(c.Configs["prometheus"].Content, "walpost:9187") {
		t.Error("the prometheus config does not scrape walpost:9187")
	}
}

// dockerfile is a parsed Dockerfile: one entry per instruction, with
// continuation lines joined and comments dropped.
type dockerInstr struct {
	Cmd  string // upper-cased instruction
	Args string
	Line int
}

func readDockerfile(t *testing.T) []dockerInstr {
	t.Helper()
	f, err := os.Open("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []dockerInstr
	var cur strings.Builder
	start := 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(strings.TrimSpace(cur.String()), " ")
		out = append(out, dockerInstr{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args), Line: start})
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDockerfile(t *testing.T) {
	instrs := readDockerfile(t)
	type stage struct {
		name, image string
		instrs      []dockerInstr
	}
	var stages []*stage
	args := map[string]string{} // global ARG defaults, for FROM lines
	fromRE := regexp.MustCompile(`^(?:--platform=\S+\s+)?(\S+)(?:\s+(?i:AS)\s+(\S+))?$`)
	for _, in := range instrs {
		switch {
		case in.Cmd == "ARG" && len(stages) == 0:
			k, v, _ := strings.Cut(in.Args, "=")
			args[k] = v
		case in.Cmd == "FROM":
			m := fromRE.FindStringSubmatch(in.Args)
			if m == nil {
				t.Fatalf("line %d: cannot parse FROM %s", in.Line, in.Args)
			}
			img := os.Expand(m[1], func(k string) string { return args[k] })
			stages = append(stages, &stage{name: m[2], image: img})
		case len(stages) > 0:
			stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, in)
		}
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stage(s), want a multi-stage build (builder + runtime)", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(build.image, "golang:1.26") {
		t.Errorf("builder image %q, want golang:1.26", build.image)
	}
	names := map[string]bool{}
	for _, s := range stages[:len(stages)-1] {
		names[s.name] = true
	}
	var user, entrypoint, command string
	copiedFromBuilder := false
	for _, in := range final.instrs {
		switch in.Cmd {
		case "USER":
			user = in.Args
		case "ENTRYPOINT":
			entrypoint = in.Args
		case "CMD":
			command = in.Args
		case "COPY":
			if m := regexp.MustCompile(`--from=(\S+)`).FindStringSubmatch(in.Args); m != nil {
				if !names[m[1]] {
					t.Errorf("line %d: COPY --from=%s names no earlier stage", in.Line, m[1])
				}
				copiedFromBuilder = true
			}
		}
	}
	if !copiedFromBuilder {
		t.Error("the runtime stage copies nothing from the builder")
	}
	u, g, _ := strings.Cut(user, ":")
	if user == "" || u == "root" || u == "0" || g == "0" || g == "root" {
		t.Errorf("runtime stage USER is %q, want a non-root user and group", user)
	}
	if entrypoint != `["walpost"]` {
		t.Errorf("ENTRYPOINT %s, want [\"walpost\"]", entrypoint)
	}
	if command != `["run"]` {
		t.Errorf("CMD %s, want [\"run\"]", command)
	}
	// walpost needs no cgo (the SQL parser of walpost lint runs as
	// WebAssembly): the builder sets CGO_ENABLED=0, so the binary is static
	// and does not depend on the runtime image's libc.
	static := false
	for _, in := range build.instrs {
		if (in.Cmd == "ENV" || in.Cmd == "RUN") && strings.Contains(in.Args, "CGO_ENABLED=0") {
			static = true
		}
		if (in.Cmd == "ENV" || in.Cmd == "RUN") && strings.Contains(in.Args, "CGO_ENABLED=1") {
			t.Errorf("line %d: the build enables cgo; walpost is built static", in.Line)
		}
	}
	if !static {
		t.Error("the builder does not set CGO_ENABLED=0")
	}
}

func TestDockerignore(t *testing.T) {
	b, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, strings.TrimSuffix(strings.TrimPrefix(l, "/"), "/"))
		}
	}
	for _, want := range []string{".git", ".stack"} {
		if !slices.Contains(patterns, want) {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
	for _, need := range []string{"go.mod", "go.sum", "cmd", "migrations", "*.go", "*.sql", "**"} {
		if slices.Contains(patterns, need) {
			t.Errorf(".dockerignore excludes %s, which the build needs", need)
		}
	}
}
