// Package configs holds the typed configuration of every miniplane component: one struct per
// component with its defaults (Default*) and a Validate method, and Load, which overlays a YAML
// file, MINIPLANE_* environment variables and command-line flags on those defaults, in that
// order (flags win). It is a leaf: it imports no other miniplane package, and it is the only
// package that touches viper.
//
// Keys are the flag names (kebab-case); nested sections are separated by "::" in flag-key
// mappings and by "_" in environment variables, e.g. MINIPLANE_APISERVER_TOKEN_FILE.
package configs
