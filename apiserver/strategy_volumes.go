package apiserver

import (
	"reflect"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// PersistentVolumeClaims and PersistentVolumes are stored and served with kube-apiserver's
// defaults and validation, but miniplane runs no volume binder: a claim stays Pending and a
// volume is never bound to one (the API server says so with an event on each new object, see
// resource.notRunBy). They are served because manifests carry them and because kubectl's
// `apply --prune` maps every kind of its default prune list, these among them, before it
// prunes anything. docs/kinds-and-admission.md says more.

// accessModes are the access modes of a volume or claim, in the order upstream lists them.
var accessModes = []string{string(corev1.ReadOnlyMany), string(corev1.ReadWriteMany), string(corev1.ReadWriteOnce), string(corev1.ReadWriteOncePod)}

// validateAccessModes requires at least one supported mode; ReadWriteOncePod stands alone.
func validateAccessModes(modes []corev1.PersistentVolumeAccessMode, p *field.Path) field.ErrorList {
	if len(modes) == 0 {
		return field.ErrorList{field.Required(p, "at least 1 access mode is required")}
	}
	var errs field.ErrorList
	rwop := false
	for _, m := range modes {
		switch m {
		case corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany:
		case corev1.ReadWriteOncePod:
			rwop = true
		default:
			errs = append(errs, field.NotSupported(p, m, accessModes))
		}
	}
	if rwop && len(modes) > 1 {
		errs = append(errs, field.Forbidden(p, "may not use ReadWriteOncePod with other access modes"))
	}
	return errs
}

func validateVolumeMode(mode *corev1.PersistentVolumeMode, p *field.Path) field.ErrorList {
	if mode == nil || *mode == corev1.PersistentVolumeBlock || *mode == corev1.PersistentVolumeFilesystem {
		return nil
	}
	return field.ErrorList{field.NotSupported(p, *mode, []string{string(corev1.PersistentVolumeBlock), string(corev1.PersistentVolumeFilesystem)})}
}

func validateStorageClassName(name string, p *field.Path) field.ErrorList {
	if name == "" {
		return nil
	}
	var errs field.ErrorList
	for _, msg := range apivalidation.NameIsDNSSubdomain(name, false) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	return errs
}

// validateStorageQuantity requires a positive storage quantity in list, a claim's requests
// or a volume's capacity.
func validateStorageQuantity(list corev1.ResourceList, p *field.Path) field.ErrorList {
	q, ok := list[corev1.ResourceStorage]
	if !ok {
		return field.ErrorList{field.Required(p.Key(string(corev1.ResourceStorage)), "")}
	}
	if q.Sign() <= 0 {
		return field.ErrorList{field.Invalid(p.Key(string(corev1.ResourceStorage)), q.String(), "must be greater than zero")}
	}
	return nil
}

func defaultVolumeMode(mode **corev1.PersistentVolumeMode) {
	if *mode == nil {
		fs := corev1.PersistentVolumeFilesystem
		*mode = &fs
	}
}

var persistentVolumeClaimRules = kindRules[*corev1.PersistentVolumeClaim]{
	hasStatus: true,
	defaults: func(pvc *corev1.PersistentVolumeClaim) {
		defaultVolumeMode(&pvc.Spec.VolumeMode)
	},
	onCreate: func(pvc *corev1.PersistentVolumeClaim, _ time.Time) {
		pvc.Status.Phase = corev1.ClaimPending
	},
	check: func(pvc *corev1.PersistentVolumeClaim) field.ErrorList {
		p := field.NewPath("spec")
		errs := validateAccessModes(pvc.Spec.AccessModes, p.Child("accessModes"))
		if pvc.Spec.Selector != nil {
			errs = append(errs, metav1validation.ValidateLabelSelector(pvc.Spec.Selector, metav1validation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
		}
		errs = append(errs, validateStorageQuantity(pvc.Spec.Resources.Requests, p.Child("resources").Child("requests"))...)
		if pvc.Spec.StorageClassName != nil {
			errs = append(errs, validateStorageClassName(*pvc.Spec.StorageClassName, p.Child("storageClassName"))...)
		}
		return append(errs, validateVolumeMode(pvc.Spec.VolumeMode, p.Child("volumeMode"))...)
	},
	checkUpdate: func(pvc, old *corev1.PersistentVolumeClaim) field.ErrorList {
		// What may change: the requested size of a bound claim (expansion, never smaller),
		// its volume attributes class, and the volume name of a claim that had none.
		mutable := pvc.Spec.DeepCopy()
		mutable.Resources.Requests = old.Spec.Resources.Requests
		mutable.VolumeAttributesClassName = old.Spec.VolumeAttributesClassName
		if old.Spec.VolumeName == "" {
			mutable.VolumeName = ""
		}
		p := field.NewPath("spec")
		var errs field.ErrorList
		bound := old.Status.Phase == corev1.ClaimBound
		if !apiequality.Semantic.DeepEqual(*mutable, old.Spec) ||
			(!bound && !apiequality.Semantic.DeepEqual(pvc.Spec.Resources.Requests, old.Spec.Resources.Requests)) {
			errs = append(errs, field.Forbidden(p, "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"))
		}
		newSize, oldSize := pvc.Spec.Resources.Requests[corev1.ResourceStorage], old.Spec.Resources.Requests[corev1.ResourceStorage]
		if bound && newSize.Cmp(oldSize) < 0 {
			errs = append(errs, field.Forbidden(p.Child("resources", "requests", "storage"), "field can not be less than previous value"))
		}
		return errs
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Status", Type: "string", Description: "The phase of the claim."},
		{Name: "Volume", Type: "string", Description: "The volume bound to the claim."},
		{Name: "Capacity", Type: "string", Description: "The actual storage of the volume bound to the claim."},
		{Name: "Access Modes", Type: "string", Description: "The access modes of the volume bound to the claim."},
		{Name: "StorageClass", Type: "string", Description: "The storage class the claim asks for."},
		{Name: "VolumeAttributesClass", Type: "string", Description: "The volume attributes class the claim asks for."},
		ageColumn(),
		{Name: "VolumeMode", Type: "string", Priority: 1, Description: "Whether the volume is a filesystem or a raw block device."},
	},
	row: func(pvc *corev1.PersistentVolumeClaim, now time.Time) []any {
		capacity, modes := "", ""
		if pvc.Spec.VolumeName != "" {
			modes = shortAccessModes(pvc.Status.AccessModes)
			if q, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok {
				capacity = q.String()
			}
		}
		class := pvc.Spec.StorageClassName
		if v, ok := pvc.Annotations[corev1.BetaStorageClassAnnotation]; ok && class == nil {
			class = &v
		}
		return []any{pvc.Name, string(pvc.Status.Phase), pvc.Spec.VolumeName, capacity, modes,
			unsetIfNil(class), unsetIfNil(pvc.Spec.VolumeAttributesClassName),
			age(pvc.CreationTimestamp, now), volumeModeText(pvc.Spec.VolumeMode)}
	},
}

// persistentVolumeSources are the names of the volume sources a PersistentVolume may have,
// by field of corev1.PersistentVolumeSource.
func persistentVolumeSources(src *corev1.PersistentVolumeSource) []string {
	var set []string
	v := reflect.ValueOf(src).Elem()
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		if !v.Field(i).IsNil() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			set = append(set, name)
		}
	}
	sort.Strings(set)
	return set
}

var persistentVolumeRules = kindRules[*corev1.PersistentVolume]{
	hasStatus: true,
	defaults: func(pv *corev1.PersistentVolume) {
		if pv.Spec.PersistentVolumeReclaimPolicy == "" {
			pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
		}
		defaultVolumeMode(&pv.Spec.VolumeMode)
	},
	onCreate: func(pv *corev1.PersistentVolume, now time.Time) {
		pv.Status.Phase = corev1.VolumePending
		t := metav1.NewTime(now)
		pv.Status.LastPhaseTransitionTime = &t
	},
	check: func(pv *corev1.PersistentVolume) field.ErrorList {
		p := field.NewPath("spec")
		errs := validateAccessModes(pv.Spec.AccessModes, p.Child("accessModes"))
		if len(pv.Spec.Capacity) == 0 {
			errs = append(errs, field.Required(p.Child("capacity"), ""))
		} else {
			errs = append(errs, validateStorageQuantity(pv.Spec.Capacity, p.Child("capacity"))...)
			for _, name := range sortedResourceNames(pv.Spec.Capacity) {
				if name != corev1.ResourceStorage {
					errs = append(errs, field.NotSupported(p.Child("capacity"), name, []string{string(corev1.ResourceStorage)}))
				}
			}
		}
		switch srcs := persistentVolumeSources(&pv.Spec.PersistentVolumeSource); len(srcs) {
		case 0:
			errs = append(errs, field.Required(p, "must specify a volume type"))
		case 1:
		default:
			for _, name := range srcs[1:] {
				errs = append(errs, field.Forbidden(p.Child(name), "may not specify more than 1 volume type"))
			}
		}
		switch pv.Spec.PersistentVolumeReclaimPolicy {
		case corev1.PersistentVolumeReclaimDelete, corev1.PersistentVolumeReclaimRecycle, corev1.PersistentVolumeReclaimRetain:
		default:
			errs = append(errs, field.NotSupported(p.Child("persistentVolumeReclaimPolicy"), pv.Spec.PersistentVolumeReclaimPolicy,
				[]string{string(corev1.PersistentVolumeReclaimDelete), string(corev1.PersistentVolumeReclaimRecycle), string(corev1.PersistentVolumeReclaimRetain)}))
		}
		errs = append(errs, validateStorageClassName(pv.Spec.StorageClassName, p.Child("storageClassName"))...)
		return append(errs, validateVolumeMode(pv.Spec.VolumeMode, p.Child("volumeMode"))...)
	},
	checkUpdate: func(pv, old *corev1.PersistentVolume) field.ErrorList {
		p := field.NewPath("spec")
		var errs field.ErrorList
		if !apiequality.Semantic.DeepEqual(pv.Spec.PersistentVolumeSource, old.Spec.PersistentVolumeSource) {
			errs = append(errs, field.Forbidden(p.Child("persistentvolumesource"), "spec.persistentvolumesource is immutable after creation"))
		}
		errs = append(errs, immutable(!apiequality.Semantic.DeepEqual(pv.Spec.VolumeMode, old.Spec.VolumeMode), pv.Spec.VolumeMode, p.Child("volumeMode"))...)
		if old.Spec.NodeAffinity != nil {
			errs = append(errs, immutable(!apiequality.Semantic.DeepEqual(pv.Spec.NodeAffinity, old.Spec.NodeAffinity), pv.Spec.NodeAffinity, p.Child("nodeAffinity"))...)
		}
		return errs
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Capacity", Type: "string", Description: "The storage of the volume."},
		{Name: "Access Modes", Type: "string", Description: "How the volume can be mounted."},
		{Name: "Reclaim Policy", Type: "string", Description: "What happens to the volume when its claim is released."},
		{Name: "Status", Type: "string", Description: "The phase of the volume."},
		{Name: "Claim", Type: "string", Description: "The claim bound to the volume."},
		{Name: "StorageClass", Type: "string", Description: "The storage class of the volume."},
		{Name: "VolumeAttributesClass", Type: "string", Description: "The volume attributes class of the volume."},
		{Name: "Reason", Type: "string", Description: "Why the volume is in its phase."},
		ageColumn(),
		{Name: "VolumeMode", Type: "string", Priority: 1, Description: "Whether the volume is a filesystem or a raw block device."},
	},
	row: func(pv *corev1.PersistentVolume, now time.Time) []any {
		capacity := ""
		if q, ok := pv.Spec.Capacity[corev1.ResourceStorage]; ok {
			capacity = q.String()
		}
		claim := ""
		if ref := pv.Spec.ClaimRef; ref != nil {
			claim = ref.Namespace + "/" + ref.Name
		}
		return []any{pv.Name, capacity, shortAccessModes(pv.Spec.AccessModes), string(pv.Spec.PersistentVolumeReclaimPolicy),
			string(pv.Status.Phase), claim, pv.Spec.StorageClassName, unsetIfNil(pv.Spec.VolumeAttributesClassName),
			pv.Status.Reason, age(pv.CreationTimestamp, now), volumeModeText(pv.Spec.VolumeMode)}
	},
}

// shortAccessModes is kubectl's short form of access modes: RWO,ROX,RWX,RWOP.
func shortAccessModes(modes []corev1.PersistentVolumeAccessMode) string {
	short := map[corev1.PersistentVolumeAccessMode]string{corev1.ReadWriteOnce: "RWO", corev1.ReadOnlyMany: "ROX",
		corev1.ReadWriteMany: "RWX", corev1.ReadWriteOncePod: "RWOP"}
	var out []string
	seen := map[corev1.PersistentVolumeAccessMode]bool{}
	for _, m := range []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOncePod} {
		for _, have := range modes {
			if have == m && !seen[m] {
				seen[m] = true
				out = append(out, short[m])
			}
		}
	}
	return strings.Join(out, ",")
}

func unsetIfNil(s *string) string {
	if s == nil {
		return "<unset>"
	}
	return *s
}

func volumeModeText(m *corev1.PersistentVolumeMode) string {
	if m == nil {
		return "<unset>"
	}
	return string(*m)
}
