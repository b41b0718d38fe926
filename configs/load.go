package configs

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

// EnvPrefix is the prefix of every environment variable that configures miniplane.
// A key `apiserver::token-file` is read from MINIPLANE_APISERVER_TOKEN_FILE.
const EnvPrefix = "MINIPLANE"

// keyDelimiter separates nested configuration keys. Viper's default "." would split map
// keys such as the node label "kubernetes.io/hostname" into nested keys.
const keyDelimiter = "::"

// ConfigFlag is the flag that names the YAML configuration file of every command.
const ConfigFlag = "config"

// A Binding ties a configuration struct to a command's flags. Bind declares one flag per
// field that has a `flag` tag, with the struct's current value as the default; Load then
// overlays the YAML file named by --config, MINIPLANE_* environment variables and the flags
// the user set, in that order (flags win).
//
// Struct tags say everything about an option, so that its names are written once:
//
//	Workers int `mapstructure:"workers" flag:"concurrent-daemonset-syncs" help:"DaemonSets synced concurrently"`
//
// `mapstructure` is the key in the YAML file (and, upper-cased, in the environment); `flag`
// names the flag and `help` is its usage line. A struct-valued field groups a section:
// without a `flag` tag its fields' flags keep their names, `flag:"prefix-"` prefixes them
// (`miniplane up` spells the controller-manager's --feature-gates as
// --controller-manager-feature-gates), and `flag:"-"` declares none.
//
// Maps (feature gates, node labels) and lists of structs that hold maps are read by Load
// itself rather than by viper, because viper lower-cases every map key it reads; a map's
// entries from the defaults, the file, the environment (`k=v,k2=v2`) and the flag are merged
// key by key, later sources winning. A map type with a CanonicalKey method has its keys
// canonicalised first, so `scheduledaemonsetpods` and `ScheduleDaemonSetPods` are one gate.
type Binding struct {
	cfg     any
	flags   *pflag.FlagSet
	options []option
	file    string
	// source says, for each key set by the user, how: "--flag", "MINIPLANE_X" or
	// "FILE: key a.b"; Check uses it to name an option the way the user wrote it.
	source map[string]string
}

// option is one leaf of a configuration struct.
type option struct {
	key   string // the full key, sections joined by keyDelimiter
	flag  string // the full flag name; "" if the option has none
	help  string
	index []int // reflect field index path from the root struct
	typ   reflect.Type
	// raw options (maps and lists of structs holding maps) are decoded here, not by viper.
	raw bool
}

// CanonicalKeyer is implemented by map types whose keys have one canonical spelling.
type CanonicalKeyer interface {
	CanonicalKey(key string) string
}

// Bind declares the flags of cfg, a pointer to a configuration struct holding its defaults,
// on flags (which may be nil for a file-only load), plus --config.
func Bind(flags *pflag.FlagSet, cfg any) *Binding { return bind(flags, cfg, true) }

// BindFlagsOnly is Bind without --config, for settings shared by every command (the root
// command's persistent flags), which the environment and flags set but no file does.
func BindFlagsOnly(flags *pflag.FlagSet, cfg any) *Binding { return bind(flags, cfg, false) }

func bind(flags *pflag.FlagSet, cfg any, withFile bool) *Binding {
	rv := reflect.ValueOf(cfg)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("configs: Bind needs a pointer to a struct, not %T", cfg))
	}
	b := &Binding{cfg: cfg, flags: flags, source: map[string]string{}}
	b.options = collect(rv.Elem().Type(), "", "", nil)
	if flags == nil {
		return b
	}
	if withFile {
		flags.StringVar(&b.file, ConfigFlag, "", "YAML configuration file; flags and MINIPLANE_* variables override it")
	}
	for _, o := range b.options {
		if o.flag != "" {
			declareFlag(flags, o, rv.Elem().FieldByIndex(o.index))
		}
	}
	return b
}

// collect lists the options of struct type t, whose keys start with prefix and whose flags
// with flagPrefix ("-" for none).
func collect(t reflect.Type, prefix, flagPrefix string, index []int) []option {
	var out []option
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, rest, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if name == "-" || (name == "" && rest != "squash") {
			continue
		}
		key := prefix + name
		idx := append(slices.Clone(index), i)
		flagTag, hasFlag := f.Tag.Lookup("flag")
		if f.Type.Kind() == reflect.Struct && f.Type != durationType {
			fp := flagPrefix
			switch {
			case fp == "-" || flagTag == "-":
				fp = "-"
			case hasFlag:
				fp += flagTag
			}
			sub := key + keyDelimiter
			if name == "" { // squash: the fields belong to the enclosing section
				sub = prefix
			}
			out = append(out, collect(f.Type, sub, fp, idx)...)
			continue
		}
		o := option{key: key, help: f.Tag.Get("help"), index: idx, typ: f.Type, raw: holdsMap(f.Type)}
		if hasFlag && flagTag != "" && flagTag != "-" && flagPrefix != "-" {
			o.flag = flagPrefix + flagTag
		}
		out = append(out, o)
	}
	return out
}

var durationType = reflect.TypeFor[time.Duration]()

// holdsMap reports whether values of t contain a map, whose keys viper would lower-case.
func holdsMap(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Map:
		return true
	case reflect.Slice, reflect.Array, reflect.Pointer:
		return holdsMap(t.Elem())
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if holdsMap(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

// declareFlag declares o's flag with def, the field's default value.
func declareFlag(fs *pflag.FlagSet, o option, def reflect.Value) {
	help := o.help
	if env := envName(o.key); help != "" {
		help += " (env " + env + ")"
	}
	switch v := def.Interface().(type) {
	case string:
		fs.String(o.flag, v, help)
	case bool:
		fs.Bool(o.flag, v, help)
	case int:
		fs.Int(o.flag, v, help)
	case int64:
		fs.Int64(o.flag, v, help)
	case float32:
		fs.Float32(o.flag, v, help)
	case float64:
		fs.Float64(o.flag, v, help)
	case time.Duration:
		fs.Duration(o.flag, v, help)
	case []string:
		fs.StringSlice(o.flag, v, help)
	default:
		if def.Kind() != reflect.Map || def.Type().Key().Kind() != reflect.String {
			panic(fmt.Sprintf("configs: option %s: no flag type for %s", o.key, def.Type()))
		}
		m := map[string]string{}
		for _, k := range def.MapKeys() {
			m[k.String()] = fmt.Sprint(def.MapIndex(k).Interface())
		}
		fs.StringToString(o.flag, m, help+"; KEY=VALUE pairs, merged over the defaults")
	}
}

// envName is the environment variable of key.
func envName(key string) string {
	r := strings.NewReplacer(keyDelimiter, "_", "-", "_")
	return EnvPrefix + "_" + strings.ToUpper(r.Replace(key))
}

// ConfigFile is the file named by --config ("" when none).
func (b *Binding) ConfigFile() string { return b.file }

// SetConfigFile names the YAML file to load, for callers without a --config flag.
func (b *Binding) SetConfigFile(file string) { b.file = file }

// Load fills the bound struct from the file, the environment and the flags. Unknown keys in
// the file are an error, so a typo is reported instead of silently ignored.
func (b *Binding) Load() error {
	tree := map[string]any{}
	if b.file != "" {
		data, err := os.ReadFile(b.file)
		if err != nil {
			return fmt.Errorf("config file: %w", err)
		}
		if err := yaml.Unmarshal(data, &tree); err != nil {
			return fmt.Errorf("config file %s: %w", b.file, err)
		}
		if tree == nil { // an empty file
			tree = map[string]any{}
		}
	}
	root := reflect.ValueOf(b.cfg).Elem()
	v := viper.NewWithOptions(viper.KeyDelimiter(keyDelimiter))
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(keyDelimiter, "_", "-", "_"))
	v.AutomaticEnv()
	raw := map[string]any{}
	for _, o := range b.options {
		b.recordSource(o, tree)
		if o.raw {
			// Taken out of the file so that viper never sees (and lower-cases) it.
			if val, ok := cutPath(tree, strings.Split(o.key, keyDelimiter)); ok {
				raw[o.key] = val
			}
			continue
		}
		v.SetDefault(o.key, root.FieldByIndex(o.index).Interface())
		if o.flag != "" && b.flags != nil {
			if err := v.BindPFlag(o.key, b.flags.Lookup(o.flag)); err != nil {
				return err
			}
		}
	}
	if err := v.MergeConfigMap(tree); err != nil {
		return fmt.Errorf("config file %s: %w", b.file, err)
	}
	if err := v.UnmarshalExact(b.cfg, viper.DecodeHook(decodeHook())); err != nil {
		return b.fileError(err)
	}
	for _, o := range b.options {
		if o.raw {
			if err := b.loadRaw(o, root.FieldByIndex(o.index), raw); err != nil {
				return err
			}
		}
	}
	return nil
}

func decodeHook() mapstructure.DecodeHookFunc {
	return mapstructure.ComposeDecodeHookFunc(
		mapstructure.StringToTimeDurationHookFunc(),
		mapstructure.StringToSliceHookFunc(","),
	)
}

func (b *Binding) fileError(err error) error {
	if b.file != "" {
		return fmt.Errorf("config file %s: %w", b.file, err)
	}
	return fmt.Errorf("configuration: %w", err)
}

// recordSource notes how the user set o, if they did; the last source wins, as in Load.
func (b *Binding) recordSource(o option, tree map[string]any) {
	if _, ok := lookupPath(tree, strings.Split(o.key, keyDelimiter)); ok {
		b.source[o.key] = fmt.Sprintf("%s: %s", b.file, strings.ReplaceAll(o.key, keyDelimiter, "."))
	}
	if _, ok := os.LookupEnv(envName(o.key)); ok {
		b.source[o.key] = envName(o.key)
	}
	if b.flagChanged(o) {
		b.source[o.key] = "--" + o.flag
	}
}

func (b *Binding) flagChanged(o option) bool {
	return o.flag != "" && b.flags != nil && b.flags.Changed(o.flag)
}

// loadRaw fills a map or a list of structs holding maps, field, from the file, the
// environment and the flag, without the lower-casing of viper.
func (b *Binding) loadRaw(o option, field reflect.Value, raw map[string]any) error {
	var layers []any // in increasing precedence
	if val, ok := raw[o.key]; ok {
		layers = append(layers, val)
	}
	if s, ok := os.LookupEnv(envName(o.key)); ok {
		if o.typ.Kind() != reflect.Map {
			return fmt.Errorf("%s: %s can only be set in the configuration file", envName(o.key), o.key)
		}
		m, err := parsePairs(s)
		if err != nil {
			return fmt.Errorf("%s: %w", envName(o.key), err)
		}
		layers = append(layers, m)
	}
	if b.flagChanged(o) {
		m, err := b.flags.GetStringToString(o.flag)
		if err != nil {
			return fmt.Errorf("--%s: %w", o.flag, err)
		}
		layers = append(layers, m)
	}
	if o.typ.Kind() != reflect.Map {
		if len(layers) > 0 { // a list is replaced, not merged
			return b.decodeInto(o, layers[len(layers)-1], field)
		}
		return nil
	}
	merged := reflect.MakeMap(o.typ)
	canon, _ := reflect.Zero(o.typ).Interface().(CanonicalKeyer)
	put := func(m reflect.Value) {
		for _, k := range m.MapKeys() {
			key := k.String()
			if canon != nil {
				key = canon.CanonicalKey(key)
			}
			merged.SetMapIndex(reflect.ValueOf(key).Convert(o.typ.Key()), m.MapIndex(k))
		}
	}
	put(field)
	for _, l := range layers {
		m := reflect.New(o.typ).Elem()
		if err := b.decodeInto(o, l, m); err != nil {
			return err
		}
		put(m)
	}
	field.Set(merged)
	return nil
}

func (b *Binding) decodeInto(o option, in any, out reflect.Value) error {
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		DecodeHook:       decodeHook(),
		ErrorUnused:      true,
		WeaklyTypedInput: true,
		Result:           out.Addr().Interface(),
	})
	if err != nil {
		return err
	}
	if err := dec.Decode(in); err != nil {
		return b.fileError(fmt.Errorf("%s: %w", strings.ReplaceAll(o.key, keyDelimiter, "."), err))
	}
	return nil
}

// parsePairs reads "k=v,k2=v2", the form of a map in an environment variable.
func parsePairs(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, val, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not KEY=VALUE", pair)
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return m, nil
}

// lookupPath finds the value at path in a YAML tree, matching keys case-insensitively as
// viper does for section and option names.
func lookupPath(tree map[string]any, path []string) (any, bool) {
	var cur any = tree
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		found := false
		for k, v := range m {
			if strings.EqualFold(k, p) {
				cur, found = v, true
				break
			}
		}
		if !found {
			return nil, false
		}
	}
	return cur, true
}

// cutPath removes the value at path from tree and returns it.
func cutPath(tree map[string]any, path []string) (any, bool) {
	parent, ok := lookupPath(tree, path[:len(path)-1])
	m, isMap := parent.(map[string]any)
	if !ok || !isMap {
		return nil, false
	}
	for k, v := range m {
		if strings.EqualFold(k, path[len(path)-1]) {
			delete(m, k)
			return v, true
		}
	}
	return nil, false
}

// Check returns err, a Validate result, with every option it names spelled as the user set
// it: the flag they typed, the environment variable or the file's key; options the user did
// not set are named by their flag, or by their key when they have none.
func (b *Binding) Check(err error) error {
	if err == nil {
		return nil
	}
	var oe *OptionError
	if !errors.As(err, &oe) {
		return err
	}
	return errors.New(oe.render(b.OptionName))
}

// OptionName is how Check names the option with key.
func (b *Binding) OptionName(key string) string {
	if s, ok := b.source[key]; ok {
		return s
	}
	for _, o := range b.options {
		if o.key == key && o.flag != "" && b.flags != nil {
			return "--" + o.flag
		}
	}
	return strings.ReplaceAll(key, keyDelimiter, ".")
}

// Flag returns the flag name of the option with key, or "" when it has none; for messages
// that tell the user what to type.
func (b *Binding) Flag(key string) string {
	for _, o := range b.options {
		if o.key == key {
			return o.flag
		}
	}
	return ""
}

// LoadFile fills cfg, a pointer to a configuration struct holding its defaults, from a YAML
// file and the environment; for tools and tests that have no flags.
func LoadFile(cfg any, file string) error {
	b := Bind(nil, cfg)
	b.SetConfigFile(file)
	return b.Load()
}
