package settings_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/guardian-pay/guardian/app/settings"
)

// The settings these tests register: a registry is per process, so their
// names are the tests' own.
var (
	wait   = settings.Duration(settings.Setting{Name: "SETTINGSTEST_WAIT", Default: "`1s`", Doc: "a wait"}, time.Second)
	token  = settings.String(settings.Setting{Name: "SETTINGSTEST_TOKEN", Default: "unset", Doc: "a token", Secret: true}, "")
	colour = settings.OneOf(settings.Setting{Name: "SETTINGSTEST_COLOUR", Default: "`red`", Doc: "a colour"}, "red", "red", "blue")
	names  = settings.List(settings.Setting{Name: "SETTINGSTEST_NAMES", Default: "unset", Doc: "names", Client: true}, ", ")
	keyLen = settings.New(settings.Setting{Name: "SETTINGSTEST_KEY", Default: "unset", Doc: "a key", Secret: true}, "", func(v string) (string, error) {
		if len(v) < 8 {
			return "", errString("is shorter than 8 characters")
		}
		return v, nil
	})
)

type errString string

func (e errString) Error() string { return string(e) }

func init() { settings.Gone("SETTINGSTEST_OLD", "set SETTINGSTEST_WAIT") }

func TestRead(t *testing.T) {
	t.Parallel()
	t.Run("DefaultsWhenUnset", func(t *testing.T) {
		t.Parallel()
		env := settings.FromMap(nil)
		if wait.Read(env) != time.Second || colour.Read(env) != "red" || names.Read(env) != nil || env.Err() != nil {
			t.Errorf("defaults: %v %v %v %v", wait.Read(env), colour.Read(env), names.Read(env), env.Err())
		}
	})
	t.Run("ParsedWhenSet", func(t *testing.T) {
		t.Parallel()
		env := settings.FromMap(map[string]string{"SETTINGSTEST_WAIT": "2m", "SETTINGSTEST_COLOUR": "blue", "SETTINGSTEST_NAMES": " a, b ,,c"})
		if wait.Read(env) != 2*time.Minute || colour.Read(env) != "blue" || strings.Join(names.Read(env), "|") != "a|b|c" || env.Err() != nil {
			t.Errorf("parsed: %v %v %v %v", wait.Read(env), colour.Read(env), names.Read(env), env.Err())
		}
	})
	t.Run("EveryProblemNamedAtOnce", func(t *testing.T) {
		t.Parallel()
		env := settings.FromMap(map[string]string{"SETTINGSTEST_WAIT": "-1s", "SETTINGSTEST_COLOUR": "green", "SETTINGSTEST_OLD": "x"})
		wait.Read(env)
		colour.Read(env)
		err := env.Err()
		for _, want := range []string{`SETTINGSTEST_WAIT: want a positive duration such as 30s, got "-1s"`, `SETTINGSTEST_COLOUR: want red or blue, got "green"`, "SETTINGSTEST_OLD is gone: set SETTINGSTEST_WAIT"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v does not say %q", err, want)
			}
		}
	})
	t.Run("ASecretIsNeverQuoted", func(t *testing.T) {
		t.Parallel()
		env := settings.FromMap(map[string]string{"SETTINGSTEST_KEY": "hunter2"})
		keyLen.Read(env)
		err := env.Err()
		if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "SETTINGSTEST_KEY: is shorter than 8 characters") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("AnUnregisteredNameIsNeverRead", func(t *testing.T) {
		t.Parallel()
		defer func() {
			if recover() == nil {
				t.Error("reading an unregistered variable did not panic")
			}
		}()
		unregistered := &settings.Var[string]{Setting: settings.Setting{Name: "SETTINGSTEST_NOWHERE"}}
		unregistered.Read(settings.FromMap(nil))
	})
}

func TestUnknownSuggestsTheNearest(t *testing.T) {
	t.Parallel()
	got := settings.Unknown([]string{"GUARDIAN_SETTINGSTEST=1", "PATH=/bin", "SETTINGSTEST_WAIT=1s"})
	if len(got) != 1 || !strings.HasPrefix(got[0], "GUARDIAN_SETTINGSTEST is not a variable Guardian reads") {
		t.Errorf("Unknown = %q", got)
	}
}

func TestListAndMarkdown(t *testing.T) {
	t.Parallel()
	var list bytes.Buffer
	if err := settings.WriteList(&list, func(k string) string {
		return map[string]string{"SETTINGSTEST_TOKEN": "s3cret-value", "SETTINGSTEST_COLOUR": "blue", "SETTINGSTEST_NAMES": "https://ana:hunter2@example.com/x"}[k]
	}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SETTINGSTEST_TOKEN", "(set)", "SETTINGSTEST_COLOUR", "blue", "SETTINGSTEST_WAIT", "(unset)"} {
		if !strings.Contains(list.String(), want) {
			t.Errorf("list does not hold %q:\n%s", want, list.String())
		}
	}
	if strings.Contains(list.String(), "s3cret-value") || strings.Contains(list.String(), "hunter2") || strings.Contains(list.String(), "SETTINGSTEST_OLD") {
		t.Errorf("list shows a secret or a gone variable:\n%s", list.String())
	}
	var md bytes.Buffer
	if err := settings.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	server, client, _ := strings.Cut(md.String(), "The operator commands")
	if !strings.Contains(server, "| `SETTINGSTEST_WAIT` | `1s` | a wait |") || !strings.Contains(client, "| `SETTINGSTEST_NAMES` | unset | names |") ||
		!strings.Contains(server, "| `SETTINGSTEST_TOKEN` | unset | a token. A secret") {
		t.Errorf("markdown:\n%s", md.String())
	}
}
