package state_test

import (
	"os"
	"strings"
	"testing"
)

// TestOneDrawing: the state drawing of this package's doc is the one the
// README and docs/design.md show, line for line.
func TestOneDrawing(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "// The one drawing of the state machine")
	if !ok {
		t.Fatal("doc.go holds no drawing")
	}
	var lines []string
	for _, l := range strings.Split(rest, "\n") {
		drawn, ok := strings.CutPrefix(l, "//\t")
		if !ok && len(lines) > 0 {
			break
		}
		if ok {
			lines = append(lines, drawn)
		}
	}
	if len(lines) < 5 {
		t.Fatalf("the drawing read is %d lines", len(lines))
	}
	drawing := strings.Join(lines, "\n")
	for _, path := range []string{"../../README.md", "../../docs/design.md"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "```\n"+drawing+"\n```") {
			t.Errorf("%s does not show app/state's drawing of the states:\n%s", path, drawing)
		}
	}
}
