package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
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

// parseStrict parses data as exactly one JSON value, in one pass, checking
// that no object repeats a key at any depth and that the nesting stays
// within maxDepth. Duplicate keys are rejected because two parsers may pick
// different values for them: what Guardian reads must be what every
// downstream reader reads. Objects come back as map[string]any, arrays as
// []any, numbers as json.Number; keys match exactly (encoding/json's
// case-insensitive field matching does not apply).
func parseStrict(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
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

func parseValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nesting deeper than %d", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	var v any
	switch delim {
	case '{':
		m := map[string]any{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, fmt.Errorf("invalid JSON: %w", err)
			}
			key, ok := tok.(string)
			if !ok {
				return nil, errors.New("invalid JSON: object key is not a string")
			}
			if _, dup := m[key]; dup {
				return nil, fmt.Errorf("duplicate key %q", truncate(key, 40))
			}
			if m[key], err = parseValue(dec, depth+1); err != nil {
				return nil, err
			}
		}
		v = m
	case '[':
		a := []any{}
		for dec.More() {
			item, err := parseValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, item)
		}
		v = a
	default:
		return nil, errors.New("invalid JSON: unexpected delimiter")
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	return v, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
