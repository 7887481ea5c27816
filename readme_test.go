package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/guardian-pay/guardian/app/settings"
)

// TestREADMEConfigurationIsTheRegistry: the README's configuration table
// is the settings registry's, as `guardian config list --markdown` prints
// it. UPDATE_README=1 writes it.
func TestREADMEConfigurationIsTheRegistry(t *testing.T) {
	t.Parallel()
	const begin, end = "<!-- settings: made by `go run . config list --markdown`; TestREADMEConfigurationIsTheRegistry checks it -->\n", "<!-- end of settings -->\n"
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	a, b := strings.Index(text, begin), strings.Index(text, end)
	if a < 0 || b < a {
		t.Fatalf("README.md has no settings section between %q and %q", begin, end)
	}
	var table bytes.Buffer
	if err := settings.WriteMarkdown(&table); err != nil {
		t.Fatal(err)
	}
	if got := text[a+len(begin) : b]; got != table.String() {
		if os.Getenv("UPDATE_README") != "" {
			if err := os.WriteFile("README.md", []byte(text[:a+len(begin)]+table.String()+text[b:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("README.md's settings differ from the registry; run UPDATE_README=1 go test -run TestREADMEConfigurationIsTheRegistry . and read the diff.\nREADME:\n%s\nregistry:\n%s", got, table.String())
	}
}
