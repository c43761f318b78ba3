package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func stamped(version string, settings ...string) *debug.BuildInfo {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/walpost/walpost", Version: version}}
	for i := 0; i+1 < len(settings); i += 2 {
		bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
	}
	return bi
}

func TestResolve(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	vcs := stamped("(devel)", "vcs.revision", rev, "vcs.time", "2026-12-01T10:00:00Z", "vcs.modified", "false")
	for _, tc := range []struct {
		name                  string
		version, commit, date string
		bi                    *debug.BuildInfo
		ok                    bool
		want                  Info
	}{
		{"ldflags win over the VCS stamp", "v1.2.0", "feedface", "2026-12-02T00:00:00Z", vcs, true,
			Info{"v1.2.0", "feedface", "2026-12-02T00:00:00Z", "go1.26.8"}},
		{"VCS stamp fills commit and date", "dev", "", "", vcs, true,
			Info{"dev", rev, "2026-12-01T10:00:00Z", "go1.26.8"}},
		{"a modified tree is dirty", "", "", "", stamped("(devel)", "vcs.revision", rev, "vcs.modified", "true"), true,
			Info{"dev", rev + "-dirty", "", "go1.26.8"}},
		{"go install module@version", "", "", "", stamped("v1.3.0"), true,
			Info{"v1.3.0", "", "", "go1.26.8"}},
		{"no build information", "", "", "", nil, false,
			Info{Version: "dev"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := resolve(tc.version, tc.commit, tc.date, tc.bi, tc.ok)
			if tc.want.GoVersion == "" {
				tc.want.GoVersion = got.GoVersion
				if !strings.HasPrefix(got.GoVersion, "go") {
					t.Errorf("GoVersion %q, want runtime.Version()", got.GoVersion)
				}
			}
			if got != tc.want {
				t.Errorf("resolve = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	got := Info{"v1.2.0", "feedface", "2026-12-02T00:00:00Z", "go1.26.8"}.String()
	if want := "v1.2.0 (commit feedface, built 2026-12-02T00:00:00Z, go1.26.8)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	if got := (Info{Version: "dev", GoVersion: "go1.26.8"}).String(); got != "dev (commit unknown, built unknown, go1.26.8)" {
		t.Errorf("String of an unstamped build = %q", got)
	}
}
