package configs

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// EnvPrefix is the prefix of every environment variable that configures miniplane.
// A key `apiserver::token-file` is read from MINIPLANE_APISERVER_TOKEN_FILE.
const EnvPrefix = "MINIPLANE"

// keyDelimiter separates nested configuration keys. Viper's default "." would split map
// keys such as the node label "kubernetes.io/hostname" into nested keys.
const keyDelimiter = "::"

// Load fills cfg, a pointer to a config struct that already holds its defaults, from the
// YAML file (when file is not empty), then MINIPLANE_* environment variables, then the flags
// the user set. Flags win. Flags are matched to keys by name; flagKeys maps a flag name to a
// different (nested) key, e.g. "etcd-servers" → "apiserver::etcd-servers".
//
// Unknown keys in the file are an error, so a typo is reported instead of silently ignored.
func Load(cfg any, file string, flags *pflag.FlagSet, flagKeys map[string]string) error {
	v := viper.NewWithOptions(viper.KeyDelimiter(keyDelimiter))
	if err := setDefaults(v, "", reflect.ValueOf(cfg).Elem()); err != nil {
		return err
	}
	if file != "" {
		if _, err := os.Stat(file); err != nil {
			return fmt.Errorf("config file: %w", err)
		}
		v.SetConfigFile(file)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return fmt.Errorf("config file %s: %w", file, err)
		}
	}
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(keyDelimiter, "_", "-", "_"))
	v.AutomaticEnv()
	if flags != nil {
		var bindErr error
		flags.VisitAll(func(f *pflag.Flag) {
			key := f.Name
			if k, ok := flagKeys[f.Name]; ok {
				key = k
			}
			if !v.IsSet(key) && !knownKey(v, key) {
				return // a flag that is not configuration (e.g. --config itself)
			}
			if err := v.BindPFlag(key, f); err != nil && bindErr == nil {
				bindErr = err
			}
		})
		if bindErr != nil {
			return bindErr
		}
	}
	hook := mapstructure.ComposeDecodeHookFunc(
		mapstructure.StringToTimeDurationHookFunc(),
		mapstructure.StringToSliceHookFunc(","),
	)
	if err := v.UnmarshalExact(cfg, viper.DecodeHook(hook)); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	return nil
}

func knownKey(v *viper.Viper, key string) bool {
	for _, k := range v.AllKeys() {
		if k == key {
			return true
		}
	}
	return false
}

// setDefaults registers every field of the struct value rv as a viper default, so that
// environment variables and flags can override keys that the file does not mention.
func setDefaults(v *viper.Viper, prefix string, rv reflect.Value) error {
	if rv.Kind() != reflect.Struct {
		return fmt.Errorf("configs: %s is not a struct", rv.Type())
	}
	for i := 0; i < rv.NumField(); i++ {
		field := rv.Type().Field(i)
		if !field.IsExported() {
			continue
		}
		tag := strings.Split(field.Tag.Get("mapstructure"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		key := prefix + tag
		fv := rv.Field(i)
		if fv.Kind() == reflect.Struct && fv.Type() != reflect.TypeOf(time.Duration(0)) {
			if err := setDefaults(v, key+keyDelimiter, fv); err != nil {
				return err
			}
			continue
		}
		v.SetDefault(key, fv.Interface())
	}
	return nil
}
