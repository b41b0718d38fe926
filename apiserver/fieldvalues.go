package apiserver

import "slices"

// fieldValues are an object's selectable fields, as field selectors read them
// (fields.Fields). The names are its resource's, one slice for every object of the kind,
// so an object holds only its values: the watch cache keeps one per version it holds,
// and a map per version cost three times as much (docs/watch-cache.md, "Memory").
type fieldValues struct {
	names  []string // the resource's selectableNames, shared
	values []string // values[i] is the value of names[i]
}

// Has reports whether name is a selectable field of the object's kind.
func (f *fieldValues) Has(name string) bool { return slices.Contains(f.names, name) }

// Get returns the value of the field name, or "" when the kind has no such field.
func (f *fieldValues) Get(name string) string {
	if i := slices.Index(f.names, name); i >= 0 {
		return f.values[i]
	}
	return ""
}

// equal reports whether f and g hold the same values of the same kind's fields.
func (f *fieldValues) equal(g *fieldValues) bool {
	return slices.Equal(f.names, g.names) && slices.Equal(f.values, g.values)
}
