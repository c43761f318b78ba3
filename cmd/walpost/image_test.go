package main

import (
	"slices"
	"strings"
	"testing"
)

// TestComposeHealthcheckWithoutShell: the walpost image has no shell and
// no curl, so the compose healthcheck of every walpost service runs a
// walpost subcommand directly (CMD, not CMD-SHELL), which exists.
func TestComposeHealthcheckWithoutShell(t *testing.T) {
	c := readCompose(t)
	known := map[string]bool{}
	for _, cmd := range newRootCommand().Commands() {
		known[cmd.Name()] = true
	}
	seen := 0
	for name, s := range c.Services {
		if !s.isWalpost() || s.Healthcheck == nil || len(s.Healthcheck.Test) == 0 {
			continue
		}
		seen++
		test := s.Healthcheck.Test
		if test[0] != "CMD" || len(test) < 3 || test[1] != "walpost" || !known[test[2]] {
			t.Errorf("service %s healthcheck %q: want [CMD, walpost, <subcommand>] (no shell or curl in the image)", name, test)
			continue
		}
		root := newRootCommand()
		cmd, rest, err := root.Find(test[2:])
		if err == nil {
			err = cmd.ParseFlags(rest)
		}
		if err != nil {
			t.Errorf("service %s healthcheck %q: %v", name, test, err)
		}
	}
	if seen == 0 {
		t.Error("no walpost service has a healthcheck")
	}
}

// TestDockerfileRuntimeDistroless: the runtime stage is distroless static
// as its nonroot user, and installs nothing (there is no package manager).
func TestDockerfileRuntimeDistroless(t *testing.T) {
	instrs := readDockerfile(t)
	last := -1
	for i, in := range instrs {
		if in.Cmd == "FROM" {
			last = i
		}
	}
	from := instrs[last].Args
	if !strings.HasPrefix(from, "gcr.io/distroless/static-debian12:nonroot") {
		t.Errorf("runtime FROM %s, want gcr.io/distroless/static-debian12:nonroot", from)
	}
	var user string
	for _, in := range instrs[last+1:] {
		switch in.Cmd {
		case "RUN":
			t.Errorf("line %d: RUN in the runtime stage (no shell there): %s", in.Line, in.Args)
		case "USER":
			user = in.Args
		}
	}
	if !slices.Contains([]string{"65532:65532", "nonroot:nonroot", "nonroot"}, user) {
		t.Errorf("runtime USER %q, want the distroless nonroot user 65532:65532", user)
	}
}
