// Package release holds the tests of walpost's release: TestReleaseWorkflow
// (in make test) runs the image steps of .github/workflows/release.yml
// against a registry of its own; TestReleaseSnapshot runs `make
// release-snapshot`, minutes of cross-compiling, so only with -tags
// release:
//
//	cd deploy && go test -tags release -count=1 -timeout 30m ./release
package release

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

const root = "../.."

// The image sections of goreleaser: the image is make image's, pushed by
// the workflow, never one goreleaser builds.
var goreleaserImageKeys = []string{"kos", "ko", "dockers", "dockers_v2", "docker_manifests", "docker_signs"}

type workflow struct {
	Jobs map[string]struct {
		Env   map[string]string `json:"env"`
		Steps []step            `json:"steps"`
	} `json:"jobs"`
}

type step struct {
	Name             string            `json:"name"`
	Uses             string            `json:"uses"`
	Run              string            `json:"run"`
	If               any               `json:"if"`
	Shell            string            `json:"shell"`
	Env              map[string]string `json:"env"`
	WorkingDirectory string            `json:"working-directory"`
}

func (s step) String() string {
	if s.Name != "" {
		return fmt.Sprintf("step %q", s.Name)
	}
	return fmt.Sprintf("step uses: %s", s.Uses)
}

// TestReleaseWorkflow: the released image is make image's. .goreleaser.yaml
// has no image section; the release job's IMAGE_REPOSITORY is the chart's
// image.repository; and the run steps after goreleaser, run as GitHub runs
// them (bash -e, GITHUB_ENV, GITHUB_PATH, working-directory) with
// IMAGE_REPOSITORY moved to a registry on the loopback interface, make
// (a stub: it records its arguments and writes an OCI layout of two
// platforms into dist/image/oci, as make image does), the real crane of
// deploy/go.mod, syft and cosign stubbed (they record their arguments):
//
//   - make image gets the tag's version without v, the commit, its time;
//     the image test checks dist/image against them;
//   - the tag X.Y.Z (and latest, unless a prerelease) names exactly the
//     index that make image wrote, both platforms;
//   - syft reads dist/image/oci per platform, and cosign attests each
//     SBOM to its platform's image by digest and signs the index by digest.
func TestReleaseWorkflow(t *testing.T) {
	checkGoreleaser(t)
	repository := chartRepository(t)
	job := releaseJob(t)
	if got := job.Env["IMAGE_REPOSITORY"]; got != repository {
		t.Fatalf("release.yml: the job's IMAGE_REPOSITORY is %q, want the chart's image.repository %q (deploy/helm/walpost/values.yaml)", got, repository)
	}
	steps := stepsAfterGoreleaser(t, job.Steps)

	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (the steps read the commit's time): %v", err)
	}
	sha := strings.TrimSpace(string(head))
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/walpost/walpost"
	fixture, index, platforms := writeLayout(t)

	// A prerelease first: no latest; then a release moves latest to it.
	for _, tc := range []struct {
		ref, version, tag string
		latest            bool
	}{
		{ref: "v1.3.0-rc.1+build.5", version: "1.3.0-rc.1+build.5", tag: "1.3.0-rc.1-build.5"},
		{ref: "v1.2.3", version: "1.2.3", tag: "1.2.3", latest: true},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			r := runSteps(t, steps, job.Env, repo, fixture, tc.ref, sha)

			date := commitTime(t, sha)
			if want := []string{"image", "VERSION=" + tc.version, "COMMIT=" + sha, "DATE=" + date}; len(r.calls("make")) != 1 || !slices.Equal(r.calls("make")[0], want) {
				t.Errorf("make was run as %q, want once as %q", r.calls("make"), want)
			}
			wantTest := []string{"WALPOST_IMAGE_DIR=" + filepath.Join(r.ws, "dist", "image"), "WALPOST_IMAGE_VERSION=" + tc.version, "WALPOST_IMAGE_COMMIT=" + sha, "WALPOST_IMAGE_DATE=" + date}
			if tests := r.calls("go-test"); len(tests) != 1 || !slices.Equal(tests[0], wantTest) {
				t.Errorf("the image test ran with %q, want once with %q", tests, wantTest)
			}

			pushed := resolve(t, repo+":"+tc.tag)
			if pushed != index {
				t.Fatalf("%s:%s is %s, want the index make image wrote, %s", repo, tc.tag, pushed, index)
			}
			latest, err := remote.Head(mustRef(t, repo+":latest"))
			switch {
			case tc.latest && (err != nil || latest.Digest != index):
				t.Errorf("latest: %v %v, want %s", latest, err, index)
			case !tc.latest && err == nil:
				t.Errorf("latest %s after the prerelease %s", latest.Digest, tc.ref)
			}

			attested := map[string]string{}
			for _, c := range r.calls("syft") {
				if len(c) == 0 {
					continue
				}
				want := "oci-dir:" + filepath.Join(r.ws, "dist", "image", "oci")
				if c[0] != want {
					t.Errorf("syft scanned %q, want make image's layout %q", c[0], want)
				}
			}
			for _, c := range r.calls("cosign") {
				sub, ref := c[0], c[len(c)-1]
				switch sub {
				case "attest":
					pred := flagValue(c, "--predicate")
					if flagValue(c, "--type") != "spdxjson" || pred == "" {
						t.Errorf("cosign %q: want --type spdxjson --predicate <syft's SBOM>", c)
						continue
					}
					b, err := os.ReadFile(filepath.Join(r.ws, pred))
					if err != nil {
						b, err = os.ReadFile(pred)
					}
					if err != nil {
						t.Errorf("cosign attest --predicate %s: %v", pred, err)
						continue
					}
					var sbom struct{ Platform, Source string }
					if err := json.Unmarshal(b, &sbom); err != nil {
						t.Errorf("%s: not syft's SBOM: %v", pred, err)
					}
					attested[sbom.Platform] = ref
				case "sign":
					if ref != repo+"@"+index.String() || !slices.Contains(c, "--recursive") {
						t.Errorf("cosign %q, want sign --recursive %s@%s (the index and its images, by digest)", c, repo, index)
					}
				default:
					t.Errorf("cosign %q", c)
				}
			}
			if !slices.ContainsFunc(r.calls("cosign"), func(c []string) bool { return c[0] == "sign" }) {
				t.Errorf("cosign never signed the image (calls %q)", r.calls("cosign"))
			}
			for p, d := range platforms {
				if want := repo + "@" + d.String(); attested[p] != want {
					t.Errorf("%s: SBOM attested to %q, want its image %s", p, attested[p], want)
				}
			}
			if len(attested) != len(platforms) {
				t.Errorf("SBOMs attested for %v, want one per platform of %v", attested, platforms)
			}
		})
	}
}

func checkGoreleaser(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".goreleaser.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf(".goreleaser.yaml: %v", err)
	}
	for _, k := range goreleaserImageKeys {
		if _, ok := cfg[k]; ok {
			t.Errorf(".goreleaser.yaml has %s: the released image is make image's, pushed by .github/workflows/release.yml, not one goreleaser builds", k)
		}
	}
	if _, ok := cfg["archives"]; !ok {
		t.Errorf(".goreleaser.yaml: no archives")
	}
}

func chartRepository(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "deploy", "helm", "walpost", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Image struct{ Repository string }
	}
	if err := yaml.Unmarshal(b, &values); err != nil || values.Image.Repository == "" {
		t.Fatalf("values.yaml: image.repository %q (%v)", values.Image.Repository, err)
	}
	return values.Image.Repository
}

func releaseJob(t *testing.T) (job struct {
	Env   map[string]string `json:"env"`
	Steps []step            `json:"steps"`
}) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".github", "workflows", "release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf workflow
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatalf("release.yml: %v", err)
	}
	job, ok := wf.Jobs["release"]
	if !ok {
		t.Fatalf("release.yml: no job release")
	}
	return job
}

// stepsAfterGoreleaser returns the steps after goreleaser's, which must be
// run steps this test can run: no uses, no if, no ${{ }}.
func stepsAfterGoreleaser(t *testing.T, steps []step) []step {
	t.Helper()
	i := slices.IndexFunc(steps, func(s step) bool { return strings.HasPrefix(s.Uses, "goreleaser/goreleaser-action@") })
	if i < 0 {
		t.Fatal("release.yml: no goreleaser step")
	}
	after := steps[i+1:]
	for _, s := range after {
		if s.Uses != "" || s.If != nil || s.Shell != "" || strings.Contains(s.Run, "${{") || strings.Contains(fmt.Sprint(s.Env), "${{") {
			t.Fatalf("release.yml: %s after goreleaser uses an action, if:, shell: or ${{ }}; the image steps are plain run steps on variables so that this test runs them", s)
		}
	}
	if len(after) == 0 {
		t.Fatal("release.yml: no step after goreleaser (make image, push, SBOM, sign)")
	}
	return after
}

// writeLayout writes an OCI layout as make image does: index.json naming
// one image index of linux/amd64 and linux/arm64 (random layers).
func writeLayout(t *testing.T) (dir string, index v1.Hash, platforms map[string]v1.Hash) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "oci")
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	platforms = map[string]v1.Hash{}
	for _, p := range []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64", Variant: "v8"}} {
		img, err := random.Image(512, 2)
		if err != nil {
			t.Fatal(err)
		}
		img = mutate.MediaType(img, types.OCIManifestSchema1)
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		platforms[p.OS+"/"+p.Architecture] = d
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "ghcr.io/walpost/walpost:test"})); err != nil {
		t.Fatal(err)
	}
	if index, err = idx.Digest(); err != nil {
		t.Fatal(err)
	}
	return dir, index, platforms
}

// run is one run of the steps: the workspace and the stubs' records.
type run struct {
	ws  string
	log string
}

// calls returns the argument lists a stub recorded, in order.
func (r run) calls(tool string) [][]string {
	f, err := os.Open(filepath.Join(r.log, tool))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var args []string
		if err := json.Unmarshal(sc.Bytes(), &args); err == nil {
			out = append(out, args)
		}
	}
	return out
}

// The stubs record their arguments as one JSON array a line (jq).
const stubHeader = `#!/usr/bin/env bash
set -euo pipefail
record() { local tool=$1; shift; jq -cn '$ARGS.positional' --args -- "$@" >> "$STUB_LOG/$tool"; }
`

var stubs = map[string]string{
	// make image: the layout into dist/image/oci, as the Makefile's image
	// target writes it.
	"make": `record make "$@"
[[ ${1:-} == image ]] || { echo "make stub: only make image" >&2; exit 2; }
rm -rf dist/image && mkdir -p dist/image && cp -r "$STUB_LAYOUT" dist/image/oci
`,
	// go test is recorded with the image test's variables; the rest is
	// the real go (the crane step builds crane).
	"go": `if [[ ${1:-} == test ]]; then
  record go-test "WALPOST_IMAGE_DIR=${WALPOST_IMAGE_DIR:-}" "WALPOST_IMAGE_VERSION=${WALPOST_IMAGE_VERSION:-}" "WALPOST_IMAGE_COMMIT=${WALPOST_IMAGE_COMMIT:-}" "WALPOST_IMAGE_DATE=${WALPOST_IMAGE_DATE:-}"
  exit 0
fi
exec "$STUB_GO" "$@"
`,
	// syft scan [--platform P] [--source-name N] [--source-version V]
	// SOURCE -o spdx-json=FILE (the flags of syft v1.57.1): records the
	// source as an absolute path, writes a small JSON naming the platform.
	"syft": `[[ ${1:-} == scan ]] || { echo "syft stub: only syft scan" >&2; exit 2; }
shift
platform="" source="" out=""
while (($#)); do
  case $1 in
    --platform) platform=$2; shift 2 ;;
    --source-name | --source-version) shift 2 ;;
    -o) out=${2#spdx-json=}; [[ $2 == spdx-json=* ]] || { echo "syft stub: -o $2, want spdx-json=FILE" >&2; exit 2; }; shift 2 ;;
    oci-dir:*) source="oci-dir:$(realpath -m "${1#oci-dir:}")"; shift ;;
    *) source=$1; shift ;;
  esac
done
record syft "$source" "$platform"
[[ -n $out ]] || { echo "syft stub: no -o spdx-json=FILE" >&2; exit 2; }
jq -n --arg p "$platform" --arg s "$source" '{spdxVersion: "SPDX-2.3", Platform: $p, Source: $s}' > "$out"
`,
	"cosign": `record cosign "$@"
`,
}

// runSteps runs steps as GitHub's runner would for the tag ref at commit
// sha, in a workspace whose entries are the repository's (symlinks) but
// dist/, and returns the records of the stubs.
func runSteps(t *testing.T, steps []step, jobEnv map[string]string, repo, layoutDir, ref, sha string) run {
	t.Helper()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Fatal("jq (the stubs record with it) is not installed: apt-get install jq")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	r := run{ws: filepath.Join(tmp, "workspace"), log: filepath.Join(tmp, "log")}
	stubDir := filepath.Join(tmp, "stubs")
	runnerTemp := filepath.Join(tmp, "runner")
	for _, d := range []string{r.ws, r.log, stubDir, runnerTemp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "dist" {
			continue
		}
		if err := os.Symlink(filepath.Join(abs, e.Name()), filepath.Join(r.ws, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range stubs {
		if err := os.WriteFile(filepath.Join(stubDir, name), []byte(stubHeader+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	realGo := os.Getenv("GO")
	if realGo == "" {
		realGo = "go"
	}
	if realGo, err = exec.LookPath(realGo); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, f := range []string{"GITHUB_ENV", "GITHUB_PATH", "GITHUB_OUTPUT"} {
		files[f] = filepath.Join(tmp, strings.ToLower(f))
		if err := os.WriteFile(files[f], nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "GITHUB_") && !strings.HasPrefix(k, "RUNNER_") && !strings.HasPrefix(k, "IMAGE_") && !strings.HasPrefix(k, "WALPOST_") && k != "PWD" && k != "OLDPWD" {
			base[k] = v
		}
	}
	for k, v := range jobEnv {
		base[k] = v
	}
	// The job's repository (checked above to be the chart's) on the
	// loopback registry.
	base["IMAGE_REPOSITORY"] = repo
	for k, v := range map[string]string{
		"CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": r.ws, "GITHUB_REF_NAME": ref, "GITHUB_REF": "refs/tags/" + ref,
		"GITHUB_SHA": sha, "RUNNER_TEMP": runnerTemp, "STUB_LOG": r.log, "STUB_LAYOUT": layoutDir, "STUB_GO": realGo,
	} {
		base[k] = v
	}
	for k, f := range files {
		base[k] = f
	}
	for _, s := range steps {
		env := maps.Clone(base)
		for k, v := range readEnvFile(t, files["GITHUB_ENV"]) {
			env[k] = v
		}
		for k, v := range s.Env {
			env[k] = v
		}
		path := []string{stubDir}
		added, _ := os.ReadFile(files["GITHUB_PATH"])
		lines := strings.Fields(string(added))
		slices.Reverse(lines)
		path = append(path, lines...)
		env["PATH"] = strings.Join(append(path, base["PATH"]), string(os.PathListSeparator))
		script := filepath.Join(tmp, "step.sh")
		if err := os.WriteFile(script, []byte(s.Run), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("bash", "-e", script)
		cmd.Dir = filepath.Join(r.ws, s.WorkingDirectory)
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", s, err, out)
		}
	}
	return r
}

// readEnvFile reads GITHUB_ENV's NAME=value lines.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.Contains(k, "<<") {
			t.Fatalf("GITHUB_ENV line %q: this test reads NAME=value lines only", line)
		}
		env[k] = v
	}
	return env
}

func commitTime(t *testing.T, sha string) string {
	t.Helper()
	cmd := exec.Command("git", "-C", root, "log", "-1", "--date=format-local:%Y-%m-%dT%H:%M:%SZ", "--format=%cd", sha)
	cmd.Env = append(os.Environ(), "TZ=UTC0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSpace(out))
}

func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	ref, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func resolve(t *testing.T, s string) v1.Hash {
	t.Helper()
	desc, err := remote.Head(mustRef(t, s))
	if err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return desc.Digest
}

func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}
