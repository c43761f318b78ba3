package inbox_test

import (
	"io"
	"os"
	"testing"
)

// TestExamples runs the examples that need PostgreSQL (go test only
// compiles examples without an Output comment), each in a fresh schema,
// and checks what they print. Example_consumer also needs Kafka and is
// only compiled; integration's TestInboxEndToEnd runs a Consumer.
func TestExamples(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func()
		want string
	}{
		{"Example", Example, "offset 0: applied true, clearing/a1 credited 30\n" +
			"offset 1: applied false, clearing/a1 credited 30\n" +
			"offset 2: applied false, clearing/a1 credited 30\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDB(t)
			appPool = d.Pool
			if got := stdout(t, tc.run); got != tc.want {
				t.Fatalf("%s printed\n%s\nwant\n%s", tc.name, got, tc.want)
			}
		})
	}
}

// stdout returns what fn prints.
func stdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	defer func() { os.Stdout = saved }()
	fn()
	os.Stdout = saved
	w.Close()
	return string(<-done)
}
