// Package buildinfo says which walpost this is: version, commit, build
// date and Go version. The values given at link time (-ldflags -X, as the
// release build and the Dockerfile set them) win; what is missing comes
// from the VCS stamp Go writes into every binary built from a checkout
// (runtime/debug.ReadBuildInfo: vcs.revision, vcs.time, vcs.modified), and
// the module version of `go install …@vX.Y.Z`.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info identifies a walpost build. Empty fields were not known.
type Info struct {
	Version   string // e.g. v1.2.0; "dev" when nothing says otherwise
	Commit    string // full commit hash, with "-dirty" when the tree had local changes
	Date      string // build (or commit) time, RFC 3339
	GoVersion string // runtime.Version()
}

// Resolve fills in what version, commit and date (the -X values, each
// possibly empty) leave open from the binary's own build information.
func Resolve(version, commit, date string) Info {
	bi, ok := debug.ReadBuildInfo()
	return resolve(version, commit, date, bi, ok)
}

func resolve(version, commit, date string, bi *debug.BuildInfo, ok bool) Info {
	info := Info{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version()}
	if ok && bi != nil {
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		if (info.Version == "" || info.Version == "dev") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		var rev, at string
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if info.Commit == "" && rev != "" {
			info.Commit = rev
			if modified {
				info.Commit += "-dirty"
			}
		}
		if info.Date == "" {
			info.Date = at
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	return info
}

// String is the line `walpost --version` prints after "walpost ".
func (i Info) String() string {
	or := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	return fmt.Sprintf("%s (commit %s, built %s, %s)", i.Version, or(i.Commit), or(i.Date), i.GoVersion)
}
