// Package configs holds the typed configuration of every miniplane command: one struct per
// component with its defaults (Default*) and a Validate method, and Binding, which declares
// each command's flags from the struct's tags and overlays a YAML file, MINIPLANE_*
// environment variables and command-line flags on the defaults, in that order (flags win).
// It is the only place a default, a flag name or a configuration key is written. It is a
// leaf: it imports no other miniplane package, and it is the only package that touches viper.
//
// Keys are kebab-case; nested sections are separated by "::" in keys and by "_" in
// environment variables, e.g. MINIPLANE_APISERVER_TOKEN_FILE. Validate names options by key;
// Binding.Check names them the way the user set them (flag, variable or file key).
package configs
