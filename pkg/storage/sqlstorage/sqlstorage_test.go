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
	for _, endpoint := range []string{
		"postgres://milo:secret@127.0.0.1:5432/milo",
		"mysql://milo:secret@tcp(127.0.0.1:3306)/milo",
	} {
		if msg := redactErr(errors.New("cannot connect as milo:secret"), endpoint); strings.Contains(msg, "secret") {
			t.Errorf("redactErr with %s: %s", endpoint, msg)
		}
	}
	// A data source name without its scheme: no parser finds its password.
	if err := Validate("milo:secret@tcp(db:3306)/milo"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("a value without a scheme: %v", err)
	}
}
