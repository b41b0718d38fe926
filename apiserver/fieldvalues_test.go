package apiserver

import (
	"testing"

	"k8s.io/apimachinery/pkg/fields"
)

// asSet returns the fields of f as a set, to compare with a wanted one.
func asSet(f fieldValues) fields.Set {
	set := fields.Set{}
	for i, name := range f.names {
		set[name] = f.values[i]
	}
	return set
}

// TestFieldValuesSelect: field selectors read fieldValues as they read a fields.Set,
// including fields the kind does not have.
func TestFieldValuesSelect(t *testing.T) {
	fv := &fieldValues{
		names:  []string{"spec.nodeName", "status.phase", "metadata.name", "metadata.namespace"},
		values: []string{"n1", "Running", "p", "ns"},
	}
	for _, tc := range []struct {
		selector string
		want     bool
	}{
		{"spec.nodeName=n1", true},
		{"spec.nodeName=n2", false},
		{"spec.nodeName!=n2,status.phase=Running", true},
		{"metadata.name=p,metadata.namespace=ns", true},
		{"metadata.namespace=other", false},
		{"spec.bogus=", true}, // an absent field reads as "", as in a fields.Set
		{"spec.bogus=x", false},
		{"spec.bogus!=x", true},
	} {
		sel, err := fields.ParseSelector(tc.selector)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := sel.Matches(fv), sel.Matches(asSet(*fv)); got != tc.want || want != tc.want {
			t.Errorf("%s: matches %v, a fields.Set %v, want %v", tc.selector, got, want, tc.want)
		}
	}
	if fv.Has("spec.bogus") || !fv.Has("status.phase") {
		t.Error("Has disagrees with the names")
	}
	other := &fieldValues{names: fv.names, values: []string{"n1", "Running", "p", "ns"}}
	if !fv.equal(other) {
		t.Error("equal values of one kind are not equal")
	}
	other.values[1] = "Succeeded"
	if fv.equal(other) {
		t.Error("a changed phase is equal")
	}
}
