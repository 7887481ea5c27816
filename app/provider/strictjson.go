package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// maxDepth bounds nesting so a hostile body cannot exhaust the stack.
const maxDepth = 64

// errNUL refuses an id or type holding U+0000: JSON allows it ("\u0000"),
// Postgres text cannot store it, and a row that cannot be stored must be
// refused (400), not answered 503 for the provider to retry for days.
var errNUL = fmt.Errorf("%w: id or type holds a NUL character", ErrMalformed)

// hasNUL reports whether any of ss holds U+0000.
func hasNUL(ss ...string) bool {
	for _, s := range ss {
		if strings.IndexByte(s, 0) >= 0 {
			return true
		}
	}
	return false
}

// parseStrict parses data as exactly one JSON value, in one pass, refusing
// an object that repeats a name at any depth (after unescaping: "a" and
// "\u0061" are one name), invalid UTF-8, and nesting deeper than maxDepth.
// Duplicate names are refused because two parsers may pick different
// values for them: what Guardian reads must be what every downstream reader
// reads. Objects come back as map[string]any, arrays as []any, numbers as
// json.Number; names match exactly (encoding/json's case-insensitive field
// matching does not apply). The tokenizer is jsontext, which checks the
// grammar and UTF-8 as it reads, without the allocations of encoding/json's
// Token, and reads the body in place (a bytes.Buffer is not copied). Names
// are checked here, against the object being built, so jsontext does not
// keep a second set of them.
func parseStrict(data []byte) (any, error) {
	dec := jsontext.NewDecoder(bytes.NewBuffer(data), jsontext.AllowDuplicateNames(true))
	v, err := parseValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

// parseObject is parseStrict for a body that must be a JSON object.
func parseObject(data []byte) (map[string]any, error) {
	v, err := parseStrict(data)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	return m, nil
}

func parseValue(dec *jsontext.Decoder) (any, error) {
	if dec.StackDepth() >= maxDepth {
		return nil, fmt.Errorf("nesting deeper than %d", maxDepth)
	}
	tok, err := dec.ReadToken()
	if err != nil {
		return nil, invalid(err)
	}
	switch tok.Kind() {
	case '{':
		m := map[string]any{}
		for dec.PeekKind() != '}' {
			name, err := dec.ReadToken()
			if err != nil {
				return nil, invalid(err)
			}
			key := name.String()
			if _, dup := m[key]; dup { // key is unescaped: "a" and "\u0061" collide
				return nil, fmt.Errorf("duplicate key %q", truncate(key, 40))
			}
			if m[key], err = parseValue(dec); err != nil {
				return nil, err
			}
		}
		return m, closing(dec)
	case '[':
		a := []any{}
		for dec.PeekKind() != ']' {
			item, err := parseValue(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, item)
		}
		return a, closing(dec)
	case '"':
		return tok.String(), nil
	case '0':
		return json.Number(tok.String()), nil
	case 't', 'f':
		return tok.Bool(), nil
	default: // 'n'
		return nil, nil
	}
}

// closing reads an object's or array's closing delimiter.
func closing(dec *jsontext.Decoder) error {
	if _, err := dec.ReadToken(); err != nil {
		return invalid(err)
	}
	return nil
}

// invalid words a tokenizer error; it names offsets and kinds, never values
// beyond a name.
func invalid(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("invalid JSON: %w", err)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
