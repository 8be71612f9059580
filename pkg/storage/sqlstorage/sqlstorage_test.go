package sqlstorage

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		endpoint string
		wrong    string // a part of the error, "" for none
	}{
		{"postgres://milo@127.0.0.1:5432/milo", ""},
		{"mysql://milo:secret@tcp(127.0.0.1:3306)/milo", ""},
		{"mysql://milo@unix(/run/mysqld/mysqld.sock)/milo", ""},
		{"sqlite:///var/lib/milo/state.db", ""},
		{"mysql://milo@tcp(127.0.0.1:3306)/", "names no database"},
		{"mysql://milo:secret@tcp(127.0.0.1:3306/milo", "not a MySQL data source name"},
		{"sqlite://", "names no database file"},
		{"etcd://127.0.0.1:2379", "is not one of postgres, mysql, sqlite"},
		{"127.0.0.1:5432", "is not a URL"},
	} {
		err := Validate(c.endpoint)
		switch {
		case c.wrong == "" && err != nil:
			t.Errorf("%s: %v", c.endpoint, err)
		case c.wrong != "" && (err == nil || !strings.Contains(err.Error(), c.wrong)):
			t.Errorf("%s: want an error saying %q, got %v", c.endpoint, c.wrong, err)
		case err != nil && strings.Contains(err.Error(), "secret"):
			t.Errorf("%s: the error shows the password: %v", c.endpoint, err)
		}
	}
}

func TestPasswordsAreNotShown(t *testing.T) {
	for endpoint, want := range map[string]string{
		"postgres://milo:secret@127.0.0.1:5432/milo":   "postgres://milo:xxxxx@127.0.0.1:5432/milo",
		"mysql://milo:secret@tcp(127.0.0.1:3306)/milo": "mysql://milo:xxxxx@tcp(127.0.0.1:3306)/milo",
		"mysql://milo@tcp(127.0.0.1:3306)/milo":        "mysql://milo@tcp(127.0.0.1:3306)/milo",
	} {
		if got := redact(endpoint); got != want {
			t.Errorf("redact(%s) = %s, want %s", endpoint, got, want)
		}
		if msg := redactErr(errors.New("cannot connect as milo:secret"), endpoint); strings.Contains(endpoint, "secret") && strings.Contains(msg, "secret") {
			t.Errorf("redactErr with %s: %s", endpoint, msg)
		}
	}
}
