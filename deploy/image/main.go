// Command image builds walpost's container image without a container
// engine (make image):
//
//	cd deploy && go run ./image -root .. -out ../dist/image -version v1.2.3 -commit $(git rev-parse HEAD) -date 2026-12-01T00:00:00Z
//
// It cross-compiles the static binary (CGO_ENABLED=0, -trimpath, the
// version, commit and date as -X main.… like make build) for each platform
// and assembles, with go-containerregistry, one image per platform from
// two layers and nothing else:
//
//   - /etc/passwd and /etc/group with root and nonroot (65532:65532),
//     /home/nonroot, /tmp (1777) and /etc/ssl/certs/ca-certificates.crt
//     copied from the build host (-ca), which is where Go's crypto/x509
//     looks on Linux;
//   - /usr/local/bin/walpost.
//
// No tzdata: walpost loads no time zone (times are UTC). The config runs
// as 65532:65532, entrypoint /usr/local/bin/walpost (also on PATH, so
// `walpost healthcheck` works as a probe), default argument run, port
// 9187, and the OCI labels source, revision, version, licenses, created.
//
// Written to -out: oci/ (an OCI image layout holding the index of both
// platforms), walpost.oci.tar (the same layout as one archive: podman load,
// skopeo, crane, docker load on Docker 25+), and walpost-linux-<arch>.docker.tar
// per platform (the `docker save` format, one platform each: docker load
// on any Docker). docs/image.md describes them.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// UID and GID of the user the image runs as (distroless's nonroot).
const (
	uid = 65532
	gid = 65532
	// BinPath is where the binary is in the image.
	binPath = "/usr/local/bin/walpost"
)

// Options say what to build and where.
type Options struct {
	Root       string   // repository root (holds go.mod and cmd/walpost)
	Out        string   // output directory
	Version    string   // -X main.version and org.opencontainers.image.version
	Commit     string   // -X main.commit and org.opencontainers.image.revision
	Date       string   // -X main.date and created (RFC 3339); empty: now
	Source     string   // org.opencontainers.image.source
	Repository string   // the name the archives tag (the chart's image.repository)
	CABundle   string   // the PEM bundle copied to /etc/ssl/certs/ca-certificates.crt
	Platforms  []string // os/arch
	Go         string   // the go command
	Log        io.Writer
}

// Result is what Build wrote.
type Result struct {
	Ref         string             // repository:tag the archives name
	IndexDigest v1.Hash            // the image index
	Images      map[string]v1.Hash // platform → image manifest digest
	Files       []string           // the files written, relative to Out
}

func main() {
	var o Options
	var platforms string
	flag.StringVar(&o.Root, "root", "..", "repository root")
	flag.StringVar(&o.Out, "out", "../dist/image", "output directory")
	flag.StringVar(&o.Version, "version", "dev", "walpost version")
	flag.StringVar(&o.Commit, "commit", "", "full commit hash")
	flag.StringVar(&o.Date, "date", "", "build date, RFC 3339 (default now)")
	flag.StringVar(&o.Source, "source", "https://github.com/walpost/walpost", "source repository URL (label)")
	flag.StringVar(&o.Repository, "repository", "ghcr.io/walpost/walpost", "image repository the archives are tagged with")
	flag.StringVar(&o.CABundle, "ca", "/etc/ssl/certs/ca-certificates.crt", "CA certificate bundle (PEM) for the image")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated os/arch list")
	flag.Parse()
	o.Platforms = strings.Split(platforms, ",")
	o.Go = os.Getenv("GO")
	o.Log = os.Stderr
	res, err := Build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s\nindex %s\n", res.Ref, res.IndexDigest)
	for _, p := range o.Platforms {
		fmt.Printf("%-12s %s\n", p, res.Images[p])
	}
	out, _ := filepath.Abs(o.Out)
	for _, f := range res.Files {
		var size int64
		err := filepath.WalkDir(filepath.Join(out, f), func(_ string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				var fi fs.FileInfo
				if fi, err = d.Info(); err == nil {
					size += fi.Size()
				}
			}
			return err
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "image:", err)
			os.Exit(1)
		}
		fmt.Printf("%-60s %6.1f MiB\n", filepath.Join(out, f), float64(size)/(1<<20))
	}
}

// Tag turns a version into an image tag: [A-Za-z0-9_.-], at most 128
// characters, not starting with . or - (a + of semver build metadata
// becomes -).
func Tag(version string) string {
	t := regexp.MustCompile(`[^A-Za-z0-9_.-]`).ReplaceAllString(version, "-")
	t = strings.TrimLeft(t, ".-")
	if len(t) > 128 {
		t = t[:128]
	}
	if t == "" {
		t = "dev"
	}
	return t
}

// Build compiles the binaries and writes the image files into o.Out.
func Build(o Options) (*Result, error) {
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	created := time.Now().UTC().Truncate(time.Second)
	if o.Date != "" {
		t, err := time.Parse(time.RFC3339, o.Date)
		if err != nil {
			return nil, fmt.Errorf("-date %q: %w", o.Date, err)
		}
		created = t.UTC()
	}
	date := created.Format(time.RFC3339)
	ca, err := os.ReadFile(o.CABundle)
	if err != nil {
		return nil, fmt.Errorf("CA certificates: %w (on Debian: apt-get install ca-certificates, or -ca FILE)", err)
	}
	if !bytes.Contains(ca, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("%s holds no PEM certificate", o.CABundle)
	}
	ref, err := name.NewTag(o.Repository + ":" + Tag(o.Version))
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "walpost",
		"org.opencontainers.image.description": "Forwards a PostgreSQL transactional outbox to Kafka from the write-ahead log",
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.url":         o.Source,
		"org.opencontainers.image.revision":    o.Commit,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.created":     date,
	}
	base, err := layer(created, baseFiles(ca))
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "walpost-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)

	res := &Result{Ref: ref.String(), Images: map[string]v1.Hash{}}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	images := map[string]v1.Image{}
	for _, p := range o.Platforms {
		goos, arch, ok := strings.Cut(p, "/")
		if !ok {
			return nil, fmt.Errorf("platform %q: want os/arch", p)
		}
		exe, err := goBuild(o, work, date, p, goos, arch)
		if err != nil {
			return nil, err
		}
		img, plat, err := platformImage(o, created, labels, base, exe, goos, arch)
		if err != nil {
			return nil, err
		}
		d, err := img.Digest()
		if err != nil {
			return nil, err
		}
		res.Images[p] = d
		images[p] = img
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &plat}})
	}
	idx = mutate.Annotations(idx, labels).(v1.ImageIndex)
	if res.IndexDigest, err = idx.Digest(); err != nil {
		return nil, err
	}

	if err := writeOutputs(o, ref, idx, images, created, res); err != nil {
		return nil, err
	}
	return res, nil
}

// goBuild compiles walpost for platform p (goos/arch) in work and returns the binary.
func goBuild(o Options, work, date, p, goos, arch string) ([]byte, error) {
	bin := filepath.Join(work, "walpost-"+goos+"-"+arch)
	fmt.Fprintf(o.Log, "image: go build %s\n", p)
	cmd := exec.Command(o.Go, "build", "-trimpath",
		"-ldflags", fmt.Sprintf("-s -w -X main.version=%s -X main.commit=%s -X main.date=%s", o.Version, o.Commit, date),
		"-o", bin, "./cmd/walpost")
	cmd.Dir = o.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = o.Log, o.Log
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build %s: %w", p, err)
	}
	return os.ReadFile(bin)
}

// platformImage is the image of one platform: the base layer, then the binary exe.
func platformImage(o Options, created time.Time, labels map[string]string, base v1.Layer, exe []byte, goos, arch string) (v1.Image, v1.Platform, error) {
	app, err := layer(created, []file{
		{path: "usr/", mode: 0o755, dir: true},
		{path: "usr/local/", mode: 0o755, dir: true},
		{path: "usr/local/bin/", mode: 0o755, dir: true},
		{path: strings.TrimPrefix(binPath, "/"), mode: 0o755, data: exe},
	})
	if err != nil {
		return nil, v1.Platform{}, err
	}
	plat := v1.Platform{OS: goos, Architecture: arch}
	if arch == "arm64" {
		plat.Variant = "v8"
	}
	cfg := &v1.ConfigFile{
		Created:      v1.Time{Time: created},
		Author:       "walpost",
		OS:           plat.OS,
		Architecture: plat.Architecture,
		Variant:      plat.Variant,
		Config: v1.Config{
			User:         fmt.Sprintf("%d:%d", uid, gid),
			Entrypoint:   []string{binPath},
			Cmd:          []string{"run"},
			Env:          []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
			WorkingDir:   "/",
			ExposedPorts: map[string]struct{}{"9187/tcp": {}},
			Labels:       labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, plat, err
	}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: cfg.Created, CreatedBy: "walpost image: passwd, group, CA certificates", Comment: "base"}},
		mutate.Addendum{Layer: app, MediaType: types.OCILayer, History: v1.History{Created: cfg.Created, CreatedBy: "walpost image: " + binPath, Comment: "walpost " + o.Version}},
	)
	if err != nil {
		return nil, plat, err
	}
	img = mutate.Annotations(img, labels).(v1.Image)
	return img, plat, nil
}

// writeOutputs writes the OCI layout of idx, its tar, and one docker tar per platform into o.Out.
func writeOutputs(o Options, ref name.Tag, idx v1.ImageIndex, images map[string]v1.Image, created time.Time, res *Result) error {
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	ociDir := filepath.Join(o.Out, "oci")
	if err := os.RemoveAll(ociDir); err != nil {
		return err
	}
	lp, err := layout.Write(ociDir, empty.Index)
	if err != nil {
		return err
	}
	// The name, as Docker (io.containerd.image.name) and podman/skopeo
	// (org.opencontainers.image.ref.name) read it on load.
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.String(),
		"io.containerd.image.name":          ref.String(),
	})); err != nil {
		return err
	}
	res.Files = append(res.Files, "oci")
	if err := tarDir(ociDir, filepath.Join(o.Out, "walpost.oci.tar"), created); err != nil {
		return err
	}
	res.Files = append(res.Files, "walpost.oci.tar")
	for _, p := range o.Platforms {
		f := "walpost-" + strings.ReplaceAll(p, "/", "-") + ".docker.tar"
		if err := tarball.WriteToFile(filepath.Join(o.Out, f), ref, images[p]); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		res.Files = append(res.Files, f)
	}
	return nil
}

// A file is one entry of a layer; paths are relative to /, directories
// end in /.
type file struct {
	path     string
	mode     int64
	dir      bool
	data     []byte
	uid, gid int
}

func baseFiles(ca []byte) []file {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, gid)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", gid)
	return []file{
		{path: "etc/", mode: 0o755, dir: true},
		{path: "etc/group", mode: 0o644, data: []byte(group)},
		{path: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{path: "etc/ssl/", mode: 0o755, dir: true},
		{path: "etc/ssl/certs/", mode: 0o755, dir: true},
		{path: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca},
		{path: "home/", mode: 0o755, dir: true},
		{path: "home/nonroot/", mode: 0o700, dir: true, uid: uid, gid: gid},
		{path: "root/", mode: 0o700, dir: true},
		{path: "tmp/", mode: 0o1777, dir: true},
	}
}

// layer makes an uncompressed tar of files (fixed times and owners, so the
// same input gives the same digest) into a gzip-compressed OCI layer.
func layer(mtime time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{
			Name: f.path, Mode: f.mode, ModTime: mtime, Uid: f.uid, Gid: f.gid,
			Uname: "root", Gname: "root", Format: tar.FormatPAX,
		}
		if f.uid == uid {
			h.Uname, h.Gname = "nonroot", "nonroot"
		}
		if f.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

// tarDir writes the directory dir as the tar archive dst, its entries
// sorted, with fixed times and owners.
func tarDir(dir, dst string, mtime time.Time) (err error) {
	var paths []string
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	}); err != nil {
		return err
	}
	sort.Strings(paths)
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, out.Close()) }()
	tw := tar.NewWriter(out)
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: mtime, Typeflag: tar.TypeReg, Size: st.Size()}
		if st.IsDir() {
			h.Name += "/"
			h.Mode, h.Typeflag, h.Size = 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !st.IsDir() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return err
			}
		}
	}
	return tw.Close()
}
