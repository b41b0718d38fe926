package apiserver

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// maxConfigSize is the most data a ConfigMap or a Secret may hold, as kube-apiserver's
// MaxSecretSize: objects are kept whole in etcd and in every watcher's memory.
const maxConfigSize = 1 << 20

// immutableMessage is what kube-apiserver says when an immutable ConfigMap or Secret is
// changed.
const immutableMessage = "field is immutable when `immutable` is set"

var configMapRules = kindRules[*corev1.ConfigMap]{
	check: func(cm *corev1.ConfigMap) field.ErrorList {
		var errs field.ErrorList
		size := 0
		for key, value := range cm.Data {
			errs = append(errs, validateConfigKey(key, field.NewPath("data").Key(key))...)
			size += len(value)
		}
		for key, value := range cm.BinaryData {
			errs = append(errs, validateConfigKey(key, field.NewPath("binaryData").Key(key))...)
			if _, dup := cm.Data[key]; dup {
				errs = append(errs, field.Invalid(field.NewPath("binaryData").Key(key), key, "duplicate of key present in data"))
			}
			size += len(value)
		}
		if size > maxConfigSize {
			errs = append(errs, field.TooLong(field.NewPath(""), "", maxConfigSize))
		}
		return errs
	},
	checkUpdate: func(cm, old *corev1.ConfigMap) field.ErrorList {
		if old.Immutable == nil || !*old.Immutable {
			return nil
		}
		var errs field.ErrorList
		if cm.Immutable == nil || !*cm.Immutable {
			errs = append(errs, field.Forbidden(field.NewPath("immutable"), immutableMessage))
		}
		if !apiequality.Semantic.DeepEqual(cm.Data, old.Data) {
			errs = append(errs, field.Forbidden(field.NewPath("data"), immutableMessage))
		}
		if !apiequality.Semantic.DeepEqual(cm.BinaryData, old.BinaryData) {
			errs = append(errs, field.Forbidden(field.NewPath("binaryData"), immutableMessage))
		}
		return errs
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Data", Type: "integer", Description: "Data contains the configuration data."}, ageColumn()},
	row: func(cm *corev1.ConfigMap, now time.Time) []any {
		return []any{cm.Name, int64(len(cm.Data) + len(cm.BinaryData)), age(cm.CreationTimestamp, now)}
	},
}

func validateConfigKey(key string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsConfigMapKey(key) {
		errs = append(errs, field.Invalid(p, key, msg))
	}
	return errs
}

// secretRules: stringData is folded into data on every write, as the v1 API defines it, so
// what is stored and returned only ever has data.
var secretRules = kindRules[*corev1.Secret]{
	defaults: func(s *corev1.Secret) {
		if s.Type == "" {
			s.Type = corev1.SecretTypeOpaque
		}
		if len(s.StringData) > 0 {
			if s.Data == nil {
				s.Data = map[string][]byte{}
			}
			for k, v := range s.StringData {
				s.Data[k] = []byte(v)
			}
		}
		s.StringData = nil
	},
	check: validateSecret,
	checkUpdate: func(s, old *corev1.Secret) field.ErrorList {
		errs := immutable(s.Type != old.Type, s.Type, field.NewPath("type"))
		if old.Immutable != nil && *old.Immutable {
			if s.Immutable == nil || !*s.Immutable {
				errs = append(errs, field.Forbidden(field.NewPath("immutable"), immutableMessage))
			}
			if !apiequality.Semantic.DeepEqual(s.Data, old.Data) {
				errs = append(errs, field.Forbidden(field.NewPath("data"), immutableMessage))
			}
		}
		return errs
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Type", Type: "string", Description: "Used to facilitate programmatic handling of secret data."},
		{Name: "Data", Type: "string", Description: "Data contains the secret data."}, ageColumn()},
	row: func(s *corev1.Secret, now time.Time) []any {
		return []any{s.Name, string(s.Type), int64(len(s.Data)), age(s.CreationTimestamp, now)}
	},
}

// secretRequiredKeys are the data keys each well-known Secret type must carry.
var secretRequiredKeys = map[corev1.SecretType][]string{
	corev1.SecretTypeDockercfg:        {corev1.DockerConfigKey},
	corev1.SecretTypeDockerConfigJson: {corev1.DockerConfigJsonKey},
	corev1.SecretTypeSSHAuth:          {corev1.SSHAuthPrivateKey},
	corev1.SecretTypeTLS:              {corev1.TLSCertKey, corev1.TLSPrivateKeyKey},
}

func validateSecret(s *corev1.Secret) field.ErrorList {
	var errs field.ErrorList
	data := field.NewPath("data")
	size := 0
	for key, value := range s.Data {
		errs = append(errs, validateConfigKey(key, data.Key(key))...)
		size += len(value)
	}
	if size > maxConfigSize {
		errs = append(errs, field.TooLong(data, "", maxConfigSize))
	}
	for _, key := range secretRequiredKeys[s.Type] {
		if _, ok := s.Data[key]; !ok {
			errs = append(errs, field.Required(data.Key(key), ""))
		}
	}
	switch s.Type {
	case corev1.SecretTypeServiceAccountToken:
		if s.Annotations[corev1.ServiceAccountNameKey] == "" {
			errs = append(errs, field.Required(field.NewPath("metadata", "annotations").Key(corev1.ServiceAccountNameKey), ""))
		}
	case corev1.SecretTypeDockercfg, corev1.SecretTypeDockerConfigJson:
		key := corev1.DockerConfigKey
		if s.Type == corev1.SecretTypeDockerConfigJson {
			key = corev1.DockerConfigJsonKey
		}
		if raw, ok := s.Data[key]; ok {
			var v map[string]any
			if err := json.Unmarshal(raw, &v); err != nil {
				errs = append(errs, field.Invalid(data.Key(key), "<secret contents redacted>", err.Error()))
			}
		}
	case corev1.SecretTypeBasicAuth:
		_, user := s.Data[corev1.BasicAuthUsernameKey]
		_, pass := s.Data[corev1.BasicAuthPasswordKey]
		if !user && !pass {
			errs = append(errs, field.Required(data.Key(corev1.BasicAuthUsernameKey), ""),
				field.Required(data.Key(corev1.BasicAuthPasswordKey), ""))
		}
	}
	return errs
}

var serviceAccountRules = kindRules[*corev1.ServiceAccount]{
	check: func(sa *corev1.ServiceAccount) field.ErrorList {
		var errs field.ErrorList
		for i, ref := range sa.ImagePullSecrets {
			if ref.Name == "" {
				errs = append(errs, field.Required(field.NewPath("imagePullSecrets").Index(i).Child("name"), ""))
			}
		}
		return errs
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Secrets", Type: "string", Description: "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use."},
		ageColumn()},
	row: func(sa *corev1.ServiceAccount, now time.Time) []any {
		return []any{sa.Name, int64(len(sa.Secrets)), age(sa.CreationTimestamp, now)}
	},
}

// limitRangeRules applies SetDefaults_LimitRangeItem: a container item's default limit
// falls back to its max, its default request to the default limit, then to its min.
var limitRangeRules = kindRules[*corev1.LimitRange]{
	defaults: func(lr *corev1.LimitRange) {
		for i := range lr.Spec.Limits {
			item := &lr.Spec.Limits[i]
			if item.Type != corev1.LimitTypeContainer {
				continue
			}
			if item.Default == nil {
				item.Default = corev1.ResourceList{}
			}
			if item.DefaultRequest == nil {
				item.DefaultRequest = corev1.ResourceList{}
			}
			fill := func(dst, src corev1.ResourceList) {
				for name, q := range src {
					if _, ok := dst[name]; !ok {
						dst[name] = q.DeepCopy()
					}
				}
			}
			fill(item.Default, item.Max)
			fill(item.DefaultRequest, item.Default)
			fill(item.DefaultRequest, item.Min)
		}
	},
	check: func(lr *corev1.LimitRange) field.ErrorList {
		var errs field.ErrorList
		for i, item := range lr.Spec.Limits {
			p := field.NewPath("spec", "limits").Index(i)
			switch item.Type {
			case corev1.LimitTypePod, corev1.LimitTypeContainer, corev1.LimitTypePersistentVolumeClaim:
			default:
				errs = append(errs, field.NotSupported(p.Child("type"), item.Type, []string{"Container", "PersistentVolumeClaim", "Pod"}))
			}
			for _, name := range sortedResourceNames(item.Min) {
				q := item.Min[name]
				if max, ok := item.Max[name]; ok && q.Cmp(max) > 0 {
					errs = append(errs, field.Invalid(p.Child("min").Key(string(name)), q.String(),
						fmt.Sprintf("min value %s is greater than max value %s", q.String(), max.String())))
				}
			}
			for _, list := range []struct {
				name string
				l    corev1.ResourceList
			}{{"max", item.Max}, {"min", item.Min}, {"default", item.Default}, {"defaultRequest", item.DefaultRequest}} {
				for _, name := range sortedResourceNames(list.l) {
					if q := list.l[name]; q.Sign() < 0 {
						errs = append(errs, field.Invalid(p.Child(list.name).Key(string(name)), q.String(), "must be greater than or equal to 0"))
					}
				}
			}
		}
		return errs
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Created At", Type: "date", Description: "CreationTimestamp is when the object was created."}},
	row: func(lr *corev1.LimitRange, _ time.Time) []any {
		return []any{lr.Name, lr.CreationTimestamp.UTC().Format(time.RFC3339)}
	},
}

func sortedResourceNames(l corev1.ResourceList) []corev1.ResourceName {
	out := make([]corev1.ResourceName, 0, len(l))
	for name := range l {
		out = append(out, name)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// podTemplateRules: a pod template is stored with the pod spec's defaults and validation.
var podTemplateRules = kindRules[*corev1.PodTemplate]{
	defaults: func(pt *corev1.PodTemplate) { defaultPodSpec(&pt.Template.Spec) },
	check: func(pt *corev1.PodTemplate) field.ErrorList {
		p := field.NewPath("template")
		errs := metav1validation.ValidateLabels(pt.Template.Labels, p.Child("metadata", "labels"))
		return append(errs, validateTemplateSpec(&pt.Template.Spec, p.Child("spec"))...)
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Containers", Type: "string", Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Description: "Images referenced by each container in the template."},
		{Name: "Pod Labels", Type: "string", Description: "The labels for the pod template."}},
	row: func(pt *corev1.PodTemplate, _ time.Time) []any {
		names, images := containersAndImages(&pt.Template.Spec)
		return []any{pt.Name, names, images, labels.FormatLabels(pt.Template.Labels)}
	},
}
