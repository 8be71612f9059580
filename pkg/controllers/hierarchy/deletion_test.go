package hierarchy

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestFailedMessageIsBounded: errors of many resources make a condition
// message the status write still accepts, cut on a character boundary.
func TestFailedMessageIsBounded(t *testing.T) {
	short := failedMessage(errors.New("holders.crd.example.net: the conversion webhook did not answer"))
	if short != "deleting the project's objects failed: holders.crd.example.net: the conversion webhook did not answer" {
		t.Errorf("a short message changed: %q", short)
	}
	var errs []error
	for range 200 {
		errs = append(errs, errors.New("widgets.example.com: conversion webhook for example.com/v2 failed: «délai dépassé»"))
	}
	long := failedMessage(errors.Join(errs...))
	if n := utf8.RuneCountInString(long); n != maxConditionMessage+1 || !strings.HasSuffix(long, "…") || !utf8.ValidString(long) {
		t.Errorf("a long message: %d characters, valid %v, ends %q", n, utf8.ValidString(long), long[len(long)-10:])
	}
}
