package configs

import (
	"errors"
	"fmt"
	"strings"
)

// An OptionError is a configuration value that Validate rejects. It names options by key
// (such as "leader-election::lease-duration") rather than by flag, because one option is
// spelled differently by each command (--leader-elect-lease-duration for the
// controller-manager, --controller-manager-leader-elect-lease-duration for up) and by each
// source; Binding.Check renders the keys the way the user set them.
type OptionError struct {
	// Keys lists the option at fault first, then the other options the message names.
	Keys []string
	// Format is the message, with one %s for each of Keys[1:].
	Format string
}

// invalid reports that the option key is wrong; format may name others with %s.
func invalid(key, format string, others ...string) error {
	return &OptionError{Keys: append([]string{key}, others...), Format: format}
}

// invalidf reports that the option key is wrong with a message formatted from values (not
// option names) as fmt.Sprintf does.
func invalidf(key, format string, args ...any) error {
	return invalid(key, strings.ReplaceAll(fmt.Sprintf(format, args...), "%", "%%"))
}

// Error names options by their keys, dotted as in the YAML file.
func (e *OptionError) Error() string {
	return e.render(func(key string) string { return strings.ReplaceAll(key, keyDelimiter, ".") })
}

func (e *OptionError) render(name func(key string) string) string {
	args := make([]any, 0, len(e.Keys)-1)
	for _, k := range e.Keys[1:] {
		args = append(args, name(k))
	}
	return name(e.Keys[0]) + ": " + fmt.Sprintf(e.Format, args...)
}

// within returns err with every key of an OptionError in it moved into section, so that a
// section's Validate can name its options relative to itself.
func within(section string, err error) error {
	var oe *OptionError
	if err == nil || !errors.As(err, &oe) {
		return err
	}
	keys := make([]string, len(oe.Keys))
	for i, k := range oe.Keys {
		keys[i] = section + keyDelimiter + k
	}
	return &OptionError{Keys: keys, Format: oe.Format}
}
