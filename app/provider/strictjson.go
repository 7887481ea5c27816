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

// decodeStrict unmarshals one JSON value into v after checking that data is
// exactly one value, that no object repeats a key at any depth, and that the
// nesting stays within maxDepth. Duplicate keys are rejected because two
// parsers may pick different values for them: what Guardian reads must be
// what every downstream reader reads.
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

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := checkValue(dec, 0); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after JSON value")
	}
	return json.Unmarshal(data, v)
}

func checkValue(dec *json.Decoder, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("nesting deeper than %d", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch delim {
	case '{':
		seen := map[string]struct{}{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return fmt.Errorf("invalid JSON: %w", err)
			}
			key, ok := tok.(string)
			if !ok {
				return errors.New("invalid JSON: object key is not a string")
			}
			if _, dup := seen[key]; dup {
				return fmt.Errorf("duplicate key %q", truncate(key, 40))
			}
			seen[key] = struct{}{}
			if err := checkValue(dec, depth+1); err != nil {
				return err
			}
		}
	case '[':
		for dec.More() {
			if err := checkValue(dec, depth+1); err != nil {
				return err
			}
		}
	default:
		return errors.New("invalid JSON: unexpected delimiter")
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return fmt.Errorf("invalid JSON: %w", err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
