package deploy

import (
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// valueLeaves flattens values.yaml as the README documents it: a map is
// opened into its keys when values.schema.json gives it fixed properties
// and values.yaml sets every one of them (image, secrets, serviceAccount…);
// any other value (config, resources, a list) is one entry.
func valueLeaves(prefix string, vals map[string]any, schema map[string]any, out map[string]any) {
	for k, v := range vals {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		var sub map[string]any
		if props, ok := schema["properties"].(map[string]any); ok {
			sub, _ = props[k].(map[string]any)
		}
		m, isMap := v.(map[string]any)
		if subProps, ok := sub["properties"].(map[string]any); isMap && ok && len(subProps) == len(m) {
			all := true
			for p := range subProps {
				_, has := m[p]
				all = all && has
			}
			if all {
				valueLeaves(key, m, sub, out)
				continue
			}
		}
		out[key] = v
	}
}

// readmeHelmValues reads the README's Helm values table (in "Deploy on
// Kubernetes", the table headed "| value | default | meaning |"): each
// row's value and its default, parsed as YAML.
func readmeHelmValues(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "\n## Deploy on Kubernetes\n")
	if start < 0 {
		t.Fatal("README has no section Deploy on Kubernetes")
	}
	section := s[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	lines := strings.Split(section, "\n")
	head := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == "| value | default | meaning |" {
			head = i
		}
	}
	if head < 0 || head+1 >= len(lines) || !strings.HasPrefix(lines[head+1], "|---") {
		t.Fatal(`no table headed "| value | default | meaning |" in Deploy on Kubernetes`)
	}
	doc := map[string]any{}
	for _, l := range lines[head+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(l, "|"), " | ")
		if len(cells) != 3 {
			t.Errorf("row %q: want 3 cells", l)
			continue
		}
		key := strings.Trim(strings.TrimSpace(cells[0]), "`")
		def := strings.TrimSpace(cells[1])
		if !strings.HasPrefix(def, "`") || !strings.HasSuffix(def, "`") {
			t.Errorf("%s: default %q is not one `code` span", key, def)
			continue
		}
		var v any
		if err := yaml.Unmarshal([]byte(strings.Trim(def, "`")), &v); err != nil {
			t.Errorf("%s: default %s: %v", key, def, err)
			continue
		}
		if _, dup := doc[key]; dup {
			t.Errorf("%s documented twice", key)
		}
		doc[key] = v
	}
	return doc
}

// TestReadmeHelmValues: the README's Helm values table lists every value
// of values.yaml, no other, each with values.yaml's default.
func TestReadmeHelmValues(t *testing.T) {
	var vals, schema map[string]any
	b, err := os.ReadFile("helm/walpost/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &vals); err != nil {
		t.Fatal(err)
	}
	b, err = os.ReadFile("helm/walpost/values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{}
	valueLeaves("", vals, schema, want)
	doc := readmeHelmValues(t)
	norm := func(v any) any { // one representation: JSON's
		b, _ := json.Marshal(v)
		var out any
		_ = json.Unmarshal(b, &out)
		return out
	}
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		d, ok := doc[k]
		if !ok {
			t.Errorf("README: value %s (default %v) is not in the Helm values table", k, want[k])
			continue
		}
		if !reflect.DeepEqual(norm(d), norm(want[k])) {
			t.Errorf("README: %s defaults to %v, values.yaml says %v", k, norm(d), norm(want[k]))
		}
	}
	for k := range doc {
		if _, ok := want[k]; !ok {
			t.Errorf("README documents %s, which values.yaml does not have", k)
		}
	}
	if len(doc) < 30 {
		t.Errorf("the README table has %d rows: read wrongly?", len(doc))
	}
}
