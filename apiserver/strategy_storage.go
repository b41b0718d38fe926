package apiserver

import (
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// StorageClasses, CSIDrivers and RuntimeClasses come with the node agents that install a
// storage driver or a container runtime on every node: a CSI node plugin's DaemonSet ships
// its CSIDriver and StorageClass, a sandboxed runtime's installer its RuntimeClass. They are
// stored and served with kube-apiserver's defaults and validation; nothing in miniplane
// provisions volumes or runs containers with them.

// defaultStorageClassAnnotations mark a StorageClass as the default, the beta name too
// (k8s.io/api declares no constants for them).
var defaultStorageClassAnnotations = []string{"storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"}

const (
	// maxStorageClassParameters and maxStorageClassParameterBytes bound a StorageClass's
	// parameters, as upstream does.
	maxStorageClassParameters     = 512
	maxStorageClassParameterBytes = 256 * 1024
)

var storageClassRules = kindRules[*storagev1.StorageClass]{
	defaults: func(sc *storagev1.StorageClass) {
		if sc.ReclaimPolicy == nil {
			p := corev1.PersistentVolumeReclaimDelete
			sc.ReclaimPolicy = &p
		}
		if sc.VolumeBindingMode == nil {
			m := storagev1.VolumeBindingImmediate
			sc.VolumeBindingMode = &m
		}
	},
	check: func(sc *storagev1.StorageClass) field.ErrorList {
		var errs field.ErrorList
		if sc.Provisioner == "" {
			errs = append(errs, field.Required(field.NewPath("provisioner"), ""))
		} else {
			for _, msg := range validation.IsQualifiedName(strings.ToLower(sc.Provisioner)) {
				errs = append(errs, field.Invalid(field.NewPath("provisioner"), sc.Provisioner, msg))
			}
		}
		size := 0
		for k, v := range sc.Parameters {
			size += len(k) + len(v)
		}
		if len(sc.Parameters) > maxStorageClassParameters {
			errs = append(errs, field.TooMany(field.NewPath("parameters"), len(sc.Parameters), maxStorageClassParameters))
		}
		if size > maxStorageClassParameterBytes {
			errs = append(errs, field.TooLong(field.NewPath("parameters"), "", maxStorageClassParameterBytes))
		}
		if p := sc.ReclaimPolicy; p != nil && *p != corev1.PersistentVolumeReclaimDelete && *p != corev1.PersistentVolumeReclaimRetain {
			errs = append(errs, field.NotSupported(field.NewPath("reclaimPolicy"), *p,
				[]string{string(corev1.PersistentVolumeReclaimDelete), string(corev1.PersistentVolumeReclaimRetain)}))
		}
		if m := sc.VolumeBindingMode; m != nil && *m != storagev1.VolumeBindingImmediate && *m != storagev1.VolumeBindingWaitForFirstConsumer {
			errs = append(errs, field.NotSupported(field.NewPath("volumeBindingMode"), *m,
				[]string{string(storagev1.VolumeBindingImmediate), string(storagev1.VolumeBindingWaitForFirstConsumer)}))
		}
		return errs
	},
	checkUpdate: func(sc, old *storagev1.StorageClass) field.ErrorList {
		var errs field.ErrorList
		if !apiequality.Semantic.DeepEqual(sc.Parameters, old.Parameters) {
			errs = append(errs, field.Forbidden(field.NewPath("parameters"), "updates to parameters are forbidden."))
		}
		if sc.Provisioner != old.Provisioner {
			errs = append(errs, field.Forbidden(field.NewPath("provisioner"), "updates to provisioner are forbidden."))
		}
		if !apiequality.Semantic.DeepEqual(sc.ReclaimPolicy, old.ReclaimPolicy) {
			errs = append(errs, field.Forbidden(field.NewPath("reclaimPolicy"), "updates to reclaimPolicy are forbidden."))
		}
		return append(errs, immutable(!apiequality.Semantic.DeepEqual(sc.VolumeBindingMode, old.VolumeBindingMode),
			sc.VolumeBindingMode, field.NewPath("volumeBindingMode"))...)
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Provisioner", Type: "string", Description: "Provisioner indicates the type of the provisioner."},
		{Name: "ReclaimPolicy", Type: "string", Description: "Dynamically provisioned PersistentVolumes of this storage class are created with this reclaimPolicy. Defaults to Delete."},
		{Name: "VolumeBindingMode", Type: "string", Description: "VolumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound. When unset, VolumeBindingImmediate is used."},
		{Name: "AllowVolumeExpansion", Type: "string", Description: "AllowVolumeExpansion shows whether the storage class allow volume expand"},
		ageColumn(),
	},
	row: func(sc *storagev1.StorageClass, now time.Time) []any {
		name := sc.Name
		if isDefaultClass(sc.Annotations, defaultStorageClassAnnotations) {
			name += " (default)"
		}
		reclaim, binding := "Delete", string(storagev1.VolumeBindingImmediate)
		if sc.ReclaimPolicy != nil {
			reclaim = string(*sc.ReclaimPolicy)
		}
		if sc.VolumeBindingMode != nil {
			binding = string(*sc.VolumeBindingMode)
		}
		expand := sc.AllowVolumeExpansion != nil && *sc.AllowVolumeExpansion
		return []any{name, sc.Provisioner, reclaim, binding, strconv.FormatBool(expand), age(sc.CreationTimestamp, now)}
	},
}

// isDefaultClass reports whether one of the annotations marks an object the default class.
func isDefaultClass(annotations map[string]string, names []string) bool {
	for _, n := range names {
		if annotations[n] == "true" {
			return true
		}
	}
	return false
}

// csiDriverName is what a CSI driver may be called: the name its plugin reports.
var csiDriverName = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$`)

// validateCSIDriverName is the name rule of CSIDrivers.
func validateCSIDriverName(name string, _ bool) []string {
	var msgs []string
	if len(name) > 63 {
		msgs = append(msgs, "must be no more than 63 characters")
	}
	if !csiDriverName.MatchString(name) {
		msgs = append(msgs, validation.RegexError("a name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
			csiDriverName.String(), "MyName", "my.name", "123-abc"))
	}
	return msgs
}

var csiDriverRules = kindRules[*storagev1.CSIDriver]{
	defaults: func(d *storagev1.CSIDriver) {
		spec := &d.Spec
		for _, b := range []**bool{&spec.PodInfoOnMount, &spec.StorageCapacity, &spec.RequiresRepublish, &spec.SELinuxMount} {
			if *b == nil {
				f := false
				*b = &f
			}
		}
		if spec.AttachRequired == nil {
			t := true
			spec.AttachRequired = &t
		}
		if spec.FSGroupPolicy == nil {
			p := storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy
			spec.FSGroupPolicy = &p
		}
		if len(spec.VolumeLifecycleModes) == 0 {
			spec.VolumeLifecycleModes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
		}
	},
	check: func(d *storagev1.CSIDriver) field.ErrorList {
		p := field.NewPath("spec")
		var errs field.ErrorList
		if fp := d.Spec.FSGroupPolicy; fp != nil {
			switch *fp {
			case storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy, storagev1.FileFSGroupPolicy, storagev1.NoneFSGroupPolicy:
			default:
				errs = append(errs, field.NotSupported(p.Child("fsGroupPolicy"), *fp, []string{string(storagev1.FileFSGroupPolicy),
					string(storagev1.NoneFSGroupPolicy), string(storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy)}))
			}
		}
		for i, m := range d.Spec.VolumeLifecycleModes {
			if m != storagev1.VolumeLifecyclePersistent && m != storagev1.VolumeLifecycleEphemeral {
				errs = append(errs, field.NotSupported(p.Child("volumeLifecycleModes").Index(i), m,
					[]string{string(storagev1.VolumeLifecycleEphemeral), string(storagev1.VolumeLifecyclePersistent)}))
			}
		}
		audiences := map[string]bool{}
		for i, tr := range d.Spec.TokenRequests {
			tp := p.Child("tokenRequests").Index(i)
			if audiences[tr.Audience] {
				errs = append(errs, field.Duplicate(tp.Child("audience"), tr.Audience))
			}
			audiences[tr.Audience] = true
			if s := tr.ExpirationSeconds; s != nil {
				switch {
				case *s < 600:
					errs = append(errs, field.Invalid(tp.Child("expirationSeconds"), *s, "may not specify a duration less than 10 minutes"))
				case *s > 1<<32:
					errs = append(errs, field.Invalid(tp.Child("expirationSeconds"), *s, "may not specify a duration larger than 2^32 seconds"))
				}
			}
		}
		return errs
	},
	checkUpdate: func(d, old *storagev1.CSIDriver) field.ErrorList {
		p := field.NewPath("spec")
		errs := immutable(!apiequality.Semantic.DeepEqual(d.Spec.AttachRequired, old.Spec.AttachRequired), d.Spec.AttachRequired, p.Child("attachRequired"))
		return append(errs, immutable(!apiequality.Semantic.DeepEqual(d.Spec.VolumeLifecycleModes, old.Spec.VolumeLifecycleModes),
			d.Spec.VolumeLifecycleModes, p.Child("volumeLifecycleModes"))...)
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "AttachRequired", Type: "boolean", Description: "Indicates this CSI volume driver requires an attach operation."},
		{Name: "PodInfoOnMount", Type: "boolean", Description: "Indicates this CSI volume driver requires additional pod information (like podName, podUID, etc.) during mount operations."},
		{Name: "StorageCapacity", Type: "boolean", Description: "Indicates that the CSI volume driver wants pod scheduling to consider the storage capacity that the driver deployment will report."},
		{Name: "TokenRequests", Type: "string", Description: "Indicates the CSI driver needs pods' service account tokens it is mounting volume for to do necessary authentication."},
		{Name: "RequiresRepublish", Type: "boolean", Description: "Indicates the CSI driver wants `NodePublishVolume` being periodically called."},
		{Name: "Modes", Type: "string", Description: "Defines the kinds of volumes this CSI volume driver supports."},
		ageColumn(),
	},
	row: func(d *storagev1.CSIDriver, now time.Time) []any {
		flag := func(b *bool) bool { return b != nil && *b }
		tokens := "<unset>"
		if len(d.Spec.TokenRequests) > 0 {
			var auds []string
			for _, tr := range d.Spec.TokenRequests {
				auds = append(auds, tr.Audience)
			}
			tokens = strings.Join(auds, ",")
		}
		modes := "<none>"
		if len(d.Spec.VolumeLifecycleModes) > 0 {
			var ms []string
			for _, m := range d.Spec.VolumeLifecycleModes {
				ms = append(ms, string(m))
			}
			modes = strings.Join(ms, ",")
		}
		return []any{d.Name, flag(d.Spec.AttachRequired), flag(d.Spec.PodInfoOnMount), flag(d.Spec.StorageCapacity), tokens,
			flag(d.Spec.RequiresRepublish), modes, age(d.CreationTimestamp, now)}
	},
}

var runtimeClassRules = kindRules[*nodev1.RuntimeClass]{
	check: func(rc *nodev1.RuntimeClass) field.ErrorList {
		var errs field.ErrorList
		hp := field.NewPath("handler")
		if rc.Handler == "" {
			errs = append(errs, field.Required(hp, ""))
		} else {
			for _, msg := range validation.IsDNS1123Label(rc.Handler) {
				errs = append(errs, field.Invalid(hp, rc.Handler, msg))
			}
		}
		if rc.Overhead != nil {
			for _, name := range sortedResourceNames(rc.Overhead.PodFixed) {
				if q := rc.Overhead.PodFixed[name]; q.Sign() < 0 {
					errs = append(errs, field.Invalid(field.NewPath("overhead", "podFixed").Key(string(name)), q.String(), "must be greater than or equal to 0"))
				}
			}
		}
		if s := rc.Scheduling; s != nil {
			sp := field.NewPath("scheduling")
			errs = append(errs, metav1validation.ValidateLabels(s.NodeSelector, sp.Child("nodeSelector"))...)
			errs = append(errs, validateTolerations(s.Tolerations, sp.Child("tolerations"))...)
		}
		return errs
	},
	checkUpdate: func(rc, old *nodev1.RuntimeClass) field.ErrorList {
		return immutable(rc.Handler != old.Handler, rc.Handler, field.NewPath("handler"))
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Handler", Type: "string", Description: "Handler specifies the underlying runtime and configuration that the CRI implementation will use to handle pods of this class."},
		ageColumn(),
	},
	row: func(rc *nodev1.RuntimeClass, now time.Time) []any {
		return []any{rc.Name, rc.Handler, age(rc.CreationTimestamp, now)}
	},
}
