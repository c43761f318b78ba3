package layers

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxFuncLines bounds every function of the module's production code, from
// its func line to its closing brace (DESIGN.md, "Layers": a function that
// outgrows it is split into named steps).
const maxFuncLines = 120

// maxForwarderMethods bounds the methods of forwarder.Forwarder: what one
// replication session does is the session type's, what runs beside the
// sessions is the watchers'.
const maxForwarderMethods = 15

// maxSessionStep bounds the session's entry points (run, open, serve): each
// reads as a list of named steps or actors.
const maxSessionStep = 60

type funcInfo struct {
	name  string // pkg.Recv.Name or pkg.Name
	pos   string // file:line
	lines int
	recv  string // the receiver's type name, "" for a function
	pkg   string
}

// moduleFuncs parses the production Go files of every package of the
// module (not deploy/, a module of its own).
func moduleFuncs(t *testing.T) []funcInfo {
	t.Helper()
	out := goList(t, "-f", "{{.ImportPath}} {{.Dir}} {{join .GoFiles \" \"}}", module+"/...")
	fset := token.NewFileSet()
	var funcs []funcInfo
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue
		}
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		for _, name := range fields[2:] {
			path := filepath.Join(fields[1], name)
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("parse %s: %v", path, err)
			}
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
				fi := funcInfo{name: fd.Name.Name, pkg: pkg, lines: end.Line - start.Line + 1,
					pos: fmt.Sprintf("%s:%d", filepath.Join(pkg, name), start.Line)}
				if fd.Recv != nil && len(fd.Recv.List) == 1 {
					typ := fd.Recv.List[0].Type
					if s, ok := typ.(*ast.StarExpr); ok {
						typ = s.X
					}
					if g, ok := typ.(*ast.IndexExpr); ok {
						typ = g.X
					}
					if id, ok := typ.(*ast.Ident); ok {
						fi.recv = id.Name
					}
				}
				if fi.recv != "" {
					fi.name = fi.recv + "." + fi.name
				}
				fi.name = pkg + "." + fi.name
				funcs = append(funcs, fi)
			}
		}
	}
	if len(funcs) == 0 {
		t.Fatal("no functions found: go list printed nothing usable")
	}
	return funcs
}

// TestFunctionLength: no function of the module is longer than
// maxFuncLines; the five longest are logged.
func TestFunctionLength(t *testing.T) {
	funcs := moduleFuncs(t)
	slices.SortFunc(funcs, func(a, b funcInfo) int { return cmp.Compare(b.lines, a.lines) })
	for i, f := range funcs[:min(5, len(funcs))] {
		t.Logf("longest #%d: %s, %d lines (%s)", i+1, f.name, f.lines, f.pos)
	}
	for _, f := range funcs {
		if f.lines > maxFuncLines {
			t.Errorf("%s is %d lines (%s): split it into named steps (at most %d lines)", f.name, f.lines, f.pos, maxFuncLines)
		}
	}
}

// TestForwarderShape: Forwarder keeps to what runs the sessions and what
// runs beside them; a session's entry points stay short.
func TestForwarderShape(t *testing.T) {
	var methods []string
	seen := map[string]bool{}
	for _, f := range moduleFuncs(t) {
		if f.pkg != "forwarder" {
			continue
		}
		switch f.recv {
		case "Forwarder":
			methods = append(methods, strings.TrimPrefix(f.name, "forwarder.Forwarder."))
		case "session":
			step := strings.TrimPrefix(f.name, "forwarder.session.")
			if step == "run" || step == "open" || step == "serve" {
				seen[step] = true
				if f.lines > maxSessionStep {
					t.Errorf("%s is %d lines (%s), want at most %d", f.name, f.lines, f.pos, maxSessionStep)
				}
			}
		}
	}
	t.Logf("Forwarder has %d methods: %s", len(methods), strings.Join(methods, ", "))
	if len(methods) > maxForwarderMethods {
		t.Errorf("forwarder.Forwarder has %d methods, want at most %d: move per-session work to the session type", len(methods), maxForwarderMethods)
	}
	for _, step := range []string{"run", "open", "serve"} {
		if !seen[step] {
			t.Errorf("forwarder.session.%s not found: the session type's entry points moved; update this test", step)
		}
	}
}
