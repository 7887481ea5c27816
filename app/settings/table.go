package settings

import (
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
)

// WriteMarkdown writes the registry as the README's configuration table: one
// row per setting, by name, server settings first, then the operator
// commands'. Gone variables are left out.
func WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	for _, client := range []bool{false, true} {
		if client {
			b.WriteString("\nThe operator commands (`guardian fulfilments`, `reconcile`, `events`, `bench`) read:\n\n")
		}
		b.WriteString("| variable | default | meaning |\n| --- | --- | --- |\n")
		for _, s := range All() {
			if s.Gone != "" || s.Client != client {
				continue
			}
			doc := s.Doc
			if s.Secret {
				doc += ". A secret: never logged, and `config list` shows only whether it is set"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", s.Name, s.Default, doc)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteList writes every setting with its value in env: a secret as "(set)"
// or "(unset)", never its value; a URL's password redacted, whatever the
// setting (a connector URL may carry basic credentials); an unset setting
// as its default.
func WriteList(w io.Writer, getenv func(string) string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tVALUE\tDEFAULT")
	for _, s := range All() {
		if s.Gone != "" {
			continue
		}
		v := getenv(s.Name)
		switch {
		case s.Secret && v != "":
			v = "(set)"
		case v == "":
			v = "(unset)"
		default:
			if u, err := url.Parse(v); err == nil && u.User != nil {
				v = u.Redacted()
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, v, plain(s.Default))
	}
	return tw.Flush()
}

// plain is a Markdown default as a terminal shows it.
func plain(md string) string { return strings.ReplaceAll(md, "`", "") }
