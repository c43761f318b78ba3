package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImage builds the image as make image does (into a temporary
// directory; WALPOST_IMAGE_DIR=dist/image checks what make image wrote
// instead, and WALPOST_IMAGE_VERSION, _COMMIT and _DATE, when set, the
// VERSION, COMMIT and DATE it was given) and opens what it wrote: the OCI
// layout and its archive hold an index of linux/amd64 and linux/arm64,
// each image runs as 65532 with entrypoint walpost and argument run,
// carries the OCI labels, has /etc/passwd, the CA bundle and a static
// binary; the one of the amd64 layer runs and says the version and commit
// it was stamped with; the docker-save archives hold the same images;
// crane, as the release workflow runs it, pushes the layout to a registry
// from which the tag pulls the same index.
func TestImage(t *testing.T) {
	dir := os.Getenv("WALPOST_IMAGE_DIR")
	want := map[string]string{}
	for env, label := range map[string]string{
		"WALPOST_IMAGE_VERSION": "org.opencontainers.image.version",
		"WALPOST_IMAGE_COMMIT":  "org.opencontainers.image.revision",
		"WALPOST_IMAGE_DATE":    "org.opencontainers.image.created",
	} {
		if v := os.Getenv(env); v != "" {
			if dir == "" {
				t.Fatalf("%s is set without WALPOST_IMAGE_DIR: it says what make image was given, set both", env)
			}
			want[label] = v
		}
	}
	if dir == "" {
		dir = t.TempDir()
		o := Options{
			Root:       "../..",
			Out:        dir,
			Version:    "v0.0.0-imagetest+build.7",
			Commit:     "0123456789abcdef0123456789abcdef01234567",
			Date:       "2026-01-02T03:04:05Z",
			Source:     "https://github.com/walpost/walpost",
			Repository: "ghcr.io/walpost/walpost",
			CABundle:   "/etc/ssl/certs/ca-certificates.crt",
			Platforms:  []string{"linux/amd64", "linux/arm64"},
			Go:         os.Getenv("GO"),
		}
		if _, err := os.Stat(o.CABundle); err != nil {
			t.Skipf("no CA bundle on this host: %v", err)
		}
		res, err := Build(o)
		if err != nil {
			t.Fatal(err)
		}
		if res.Ref != "ghcr.io/walpost/walpost:v0.0.0-imagetest-build.7" {
			t.Errorf("ref %s, want the tag with + made -", res.Ref)
		}
		want = map[string]string{
			"org.opencontainers.image.version":  o.Version,
			"org.opencontainers.image.revision": o.Commit,
			"org.opencontainers.image.created":  o.Date,
		}
	}
	want["org.opencontainers.image.source"] = "https://github.com/walpost/walpost"
	want["org.opencontainers.image.licenses"] = "Apache-2.0"

	// The layout: index.json names one index, tagged, of two platforms.
	outer, err := layout.ImageIndexFromPath(filepath.Join(dir, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	om, err := outer.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(om.Manifests) != 1 || !om.Manifests[0].MediaType.IsIndex() {
		t.Fatalf("oci/index.json: %+v, want one image index", om.Manifests)
	}
	ref := om.Manifests[0].Annotations["org.opencontainers.image.ref.name"]
	if !strings.HasPrefix(ref, "ghcr.io/walpost/walpost:") || om.Manifests[0].Annotations["io.containerd.image.name"] != ref {
		t.Errorf("index annotations %v: want the reference ghcr.io/walpost/walpost:<tag> for podman and docker", om.Manifests[0].Annotations)
	}
	if v, ok := want["org.opencontainers.image.version"]; ok && ref != "ghcr.io/walpost/walpost:"+Tag(v) {
		t.Errorf("reference %s, want the tag of version %s", ref, v)
	}
	idx, err := outer.ImageIndex(om.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	images := map[string]v1.Image{}
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		p := d.Platform.OS + "/" + d.Platform.Architecture
		platforms = append(platforms, p)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		images[p] = img
	}
	slices.Sort(platforms)
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Fatalf("platforms %v, want linux/amd64 and linux/arm64", platforms)
	}

	var binaries = map[string][]byte{}
	for p, img := range images {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if got := cf.OS + "/" + cf.Architecture; got != p {
			t.Errorf("%s: config says %s", p, got)
		}
		c := cf.Config
		if c.User != "65532:65532" {
			t.Errorf("%s: User %q, want 65532:65532", p, c.User)
		}
		if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/walpost"}) || !slices.Equal(c.Cmd, []string{"run"}) {
			t.Errorf("%s: Entrypoint %q Cmd %q, want [/usr/local/bin/walpost] [run]", p, c.Entrypoint, c.Cmd)
		}
		if !slices.ContainsFunc(c.Env, func(e string) bool {
			return strings.HasPrefix(e, "PATH=/usr/local/bin:")
		}) {
			t.Errorf("%s: Env %q: walpost is not on PATH (walpost healthcheck)", p, c.Env)
		}
		if _, ok := c.ExposedPorts["9187/tcp"]; !ok {
			t.Errorf("%s: ExposedPorts %v, want 9187/tcp", p, c.ExposedPorts)
		}
		for k, v := range want {
			if c.Labels[k] != v {
				t.Errorf("%s: label %s = %q, want %q", p, k, c.Labels[k], v)
			}
		}
		for _, k := range []string{"version", "revision", "created"} {
			if c.Labels["org.opencontainers.image."+k] == "" {
				t.Errorf("%s: label org.opencontainers.image.%s is empty", p, k)
			}
		}
		files := extract(t, img)
		passwd := string(files["etc/passwd"].data)
		if !strings.Contains(passwd, "\nnonroot:x:65532:65532:") {
			t.Errorf("%s: /etc/passwd has no user 65532:\n%s", p, passwd)
		}
		if !strings.Contains(string(files["etc/group"].data), "nonroot:x:65532:") {
			t.Errorf("%s: /etc/group has no group 65532", p)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(files["etc/ssl/certs/ca-certificates.crt"].data) {
			t.Errorf("%s: /etc/ssl/certs/ca-certificates.crt holds no certificate", p)
		}
		if h := files["tmp/"].hdr; h == nil || h.Mode&0o1777 != 0o1777 {
			t.Errorf("%s: /tmp missing or not 1777", p)
		}
		bin := files["usr/local/bin/walpost"]
		if bin.hdr == nil || bin.hdr.Mode&0o111 == 0 {
			t.Fatalf("%s: no executable /usr/local/bin/walpost", p)
		}
		if bin.hdr.Uid != 0 {
			t.Errorf("%s: /usr/local/bin/walpost owned by %d: the user 65532 must not be able to replace it", p, bin.hdr.Uid)
		}
		checkStatic(t, p, bin.data)
		binaries[p] = bin.data
	}

	// The archive of the layout holds the same index.json and blobs.
	arch := readTar(t, filepath.Join(dir, "walpost.oci.tar"))
	layoutIndex, err := os.ReadFile(filepath.Join(dir, "oci", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(arch["index.json"].data, layoutIndex) || arch["oci-layout"].hdr == nil {
		t.Error("walpost.oci.tar: index.json or oci-layout differ from oci/")
	}
	for _, d := range append(im.Manifests, om.Manifests[0]) {
		if arch["blobs/sha256/"+d.Digest.Hex].hdr == nil {
			t.Errorf("walpost.oci.tar: no blob %s", d.Digest)
		}
	}

	// One docker-save archive per platform, with the same config.
	for p, img := range images {
		path := filepath.Join(dir, "walpost-"+strings.ReplaceAll(p, "/", "-")+".docker.tar")
		var manifest []struct {
			Config   string
			RepoTags []string
			Layers   []string
		}
		files := readTar(t, path)
		if err := json.Unmarshal(files["manifest.json"].data, &manifest); err != nil {
			t.Fatalf("%s: manifest.json: %v", path, err)
		}
		if len(manifest) != 1 || !slices.Equal(manifest[0].RepoTags, []string{ref}) || len(manifest[0].Layers) != 2 {
			t.Fatalf("%s: manifest.json %+v, want one image tagged %s with 2 layers", path, manifest, ref)
		}
		raw, err := img.RawConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(files[manifest[0].Config].data, raw) {
			t.Errorf("%s: its config differs from the OCI layout's %s image", path, p)
		}
		dimg, err := tarball.ImageFromPath(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		dl, err := dimg.Layers()
		if err != nil {
			t.Fatal(err)
		}
		ol, _ := img.Layers()
		for i := range dl {
			a, _ := dl[i].DiffID()
			b, _ := ol[i].DiffID()
			if a != b {
				t.Errorf("%s: layer %d %s, OCI layout %s", path, i, a, b)
			}
		}
	}

	checkPush(t, filepath.Join(dir, "oci"), om.Manifests[0].Digest, images)

	// The binary of the amd64 layer runs and says what it was stamped with.
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the linux/amd64 binary runs only on linux/amd64")
	}
	exe := filepath.Join(t.TempDir(), "walpost")
	if err := os.WriteFile(exe, binaries["linux/amd64"], 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("walpost --version: %v\n%s", err, out)
	}
	cf, _ := images["linux/amd64"].ConfigFile()
	l := cf.Config.Labels
	prefix := "walpost " + l["org.opencontainers.image.version"] + " (commit " + l["org.opencontainers.image.revision"] + ", built " + l["org.opencontainers.image.created"] + ", go"
	if !strings.HasPrefix(string(out), prefix) {
		t.Errorf("walpost --version = %q, want %q…", out, prefix)
	}
}

// checkPush pushes the layout as .github/workflows/release.yml does
// (crane push dist/image/oci REPOSITORY:TAG, with the crane of
// deploy/go.mod) to a registry on the loopback interface and pulls the tag
// back: crane prints the index's digest, the tag names that index, and
// each platform resolves to the layout's image of that platform.
func checkPush(t *testing.T, oci string, index v1.Hash, images map[string]v1.Image) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/walpost/walpost"
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	var stderr bytes.Buffer
	cmd := exec.Command(goCmd, "tool", "crane", "push", oci, repo+":1.2.3")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("crane push: %v\n%s", err, stderr.Bytes())
	}
	if got, want := strings.TrimSpace(string(out)), repo+"@"+index.String(); got != want {
		t.Errorf("crane push printed %q, want %q (the layout's index)", got, want)
	}
	tag, err := name.NewTag(repo + ":1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(tag)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := idx.Digest(); err != nil || d != index {
		t.Errorf("the tag pulls index %s (%v), want the layout's %s", d, err, index)
	}
	for p, img := range images {
		goos, arch, _ := strings.Cut(p, "/")
		pulled, err := remote.Image(tag, remote.WithPlatform(v1.Platform{OS: goos, Architecture: arch}))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		got, err := pulled.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := img.Digest(); got != want {
			t.Errorf("%s: the tag pulls image %s, want the layout's %s", p, got, want)
		}
	}
}

type entry struct {
	hdr  *tar.Header
	data []byte
}

// extract flattens img's layers (as a runtime would) into path → entry.
func extract(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	return readTarFrom(t, rc)
}

func readTar(t *testing.T, path string) map[string]entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return readTarFrom(t, f)
}

func readTarFrom(t *testing.T, r io.Reader) map[string]entry {
	t.Helper()
	files := map[string]entry{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(h.Name, "/")
		if h.Typeflag == tar.TypeDir && !strings.HasSuffix(name, "/") {
			name += "/"
		}
		files[name] = entry{hdr: h, data: b}
	}
}

// checkStatic: an ELF for the platform's machine without an interpreter
// (no dynamic loader, no libc in the image).
func checkStatic(t *testing.T, p string, b []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Errorf("%s: walpost is not an ELF: %v", p, err)
		return
	}
	machine := map[string]elf.Machine{"linux/amd64": elf.EM_X86_64, "linux/arm64": elf.EM_AARCH64}[p]
	if f.Machine != machine {
		t.Errorf("%s: walpost is built for %v", p, f.Machine)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("%s: walpost is dynamically linked", p)
		}
	}
}
