package apiserver

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
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

// VolumeAttachments and CSIStorageCapacities are what a CSI driver's controller sidecars
// work with: the external attacher watches VolumeAttachments and writes their status, the
// external provisioner publishes CSIStorageCapacities for the node plugin's topology. They
// are stored and served with kube-apiserver's validation, so that those sidecars (and
// tests of a driver's controller) run against miniplane; nothing in miniplane creates a
// VolumeAttachment or reads a capacity.

const (
	// maxAttachmentMetadataBytes bounds a VolumeAttachment's status.attachmentMetadata
	// and maxVolumeErrorMessage the message of its attach or detach error, as upstream.
	maxAttachmentMetadataBytes = 256 * 1024
	maxVolumeErrorMessage      = 1024
	// maxCSIDriverNameLength is the longest name a CSI driver may report.
	maxCSIDriverNameLength = 63
)

// validateCSIDriverNameField checks a CSI driver's name where a field refers to one: a
// VolumeAttachment's attacher, a CSI volume source's driver.
func validateCSIDriverNameField(name string, p *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	var errs field.ErrorList
	if len(name) > maxCSIDriverNameLength {
		errs = append(errs, field.TooLong(p, name, maxCSIDriverNameLength))
	}
	for _, msg := range validation.IsDNS1123Subdomain(strings.ToLower(name)) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	return errs
}

// validateInlineVolumeSpec checks a VolumeAttachment's inline volume: the spec of a
// PersistentVolume that a pod's CSI volume migrated from an in-tree plugin stands for,
// with the rules kube-apiserver adds for such a spec (CSI only, no capacity, no claim).
func validateInlineVolumeSpec(spec *corev1.PersistentVolumeSpec, p *field.Path) field.ErrorList {
	inline := "may not be specified in the context of inline volumes"
	var errs field.ErrorList
	if spec.ClaimRef != nil {
		errs = append(errs, field.Forbidden(p.Child("claimRef"), inline))
	}
	if len(spec.Capacity) != 0 {
		errs = append(errs, field.Forbidden(p.Child("capacity"), inline))
	}
	if spec.NodeAffinity != nil {
		errs = append(errs, field.Forbidden(p.Child("nodeAffinity"), inline))
	}
	if spec.StorageClassName != "" {
		errs = append(errs, field.Forbidden(p.Child("storageClassName"), inline))
	}
	if r := spec.PersistentVolumeReclaimPolicy; r != "" && r != corev1.PersistentVolumeReclaimRetain {
		errs = append(errs, field.Forbidden(p.Child("persistentVolumeReclaimPolicy"),
			"may only be "+string(corev1.PersistentVolumeReclaimRetain)+" in the context of inline volumes"))
	}
	if m := spec.VolumeMode; m != nil && *m != corev1.PersistentVolumeFilesystem {
		errs = append(errs, field.Forbidden(p.Child("volumeMode"),
			"may not specify volumeMode other than "+string(corev1.PersistentVolumeFilesystem)+" in the context of inline volumes"))
	}
	errs = append(errs, validateAccessModes(spec.AccessModes, p.Child("accessModes"))...)
	if spec.CSI == nil {
		errs = append(errs, field.Required(p.Child("csi"), "has to be specified in the context of inline volumes"))
	} else {
		errs = append(errs, validateCSIDriverNameField(spec.CSI.Driver, p.Child("csi", "driver"))...)
		if spec.CSI.VolumeHandle == "" {
			errs = append(errs, field.Required(p.Child("csi", "volumeHandle"), ""))
		}
	}
	if srcs := persistentVolumeSources(&spec.PersistentVolumeSource); len(srcs) > 1 {
		for _, name := range srcs {
			if name != "csi" {
				errs = append(errs, field.Forbidden(p.Child(name), "may not specify more than 1 volume type"))
			}
		}
	}
	return errs
}

// validateVolumeError checks an attach or detach error a VolumeAttachment reports.
func validateVolumeError(e *storagev1.VolumeError, p *field.Path) field.ErrorList {
	if e == nil {
		return nil
	}
	var errs field.ErrorList
	if len(e.Message) > maxVolumeErrorMessage {
		errs = append(errs, field.TooLong(p.Child("message"), "", maxVolumeErrorMessage))
	}
	if c := e.ErrorCode; c != nil && *c < 0 {
		errs = append(errs, field.Invalid(p.Child("errorCode"), *c, validation.InclusiveRangeError(0, math.MaxInt32)))
	}
	return errs
}

// validateVolumeAttachmentStatus checks what an attacher reports; kube-apiserver checks it
// on every write, the main resource's too.
func validateVolumeAttachmentStatus(st *storagev1.VolumeAttachmentStatus) field.ErrorList {
	p := field.NewPath("status")
	var errs field.ErrorList
	size := 0
	for k, v := range st.AttachmentMetadata {
		size += len(k) + len(v)
	}
	if size > maxAttachmentMetadataBytes {
		errs = append(errs, field.TooLong(p.Child("attachmentMetadata"), "", maxAttachmentMetadataBytes))
	}
	errs = append(errs, validateVolumeError(st.AttachError, p.Child("attachError"))...)
	return append(errs, validateVolumeError(st.DetachError, p.Child("detachError"))...)
}

var volumeAttachmentRules = kindRules[*storagev1.VolumeAttachment]{
	hasStatus: true,
	check: func(va *storagev1.VolumeAttachment) field.ErrorList {
		p := field.NewPath("spec")
		errs := validateCSIDriverNameField(va.Spec.Attacher, p.Child("attacher"))
		src, sp := va.Spec.Source, p.Child("source")
		switch {
		case src.InlineVolumeSpec == nil && src.PersistentVolumeName == nil:
			errs = append(errs, field.Required(sp, "must specify exactly one of inlineVolumeSpec and persistentVolumeName"))
		case src.InlineVolumeSpec != nil && src.PersistentVolumeName != nil:
			errs = append(errs, field.Forbidden(sp, "must specify exactly one of inlineVolumeSpec and persistentVolumeName"))
		case src.PersistentVolumeName != nil:
			if *src.PersistentVolumeName == "" {
				errs = append(errs, field.Required(sp.Child("persistentVolumeName"), "must specify non empty persistentVolumeName"))
			}
			for _, msg := range apivalidation.NameIsDNSSubdomain(*src.PersistentVolumeName, false) {
				errs = append(errs, field.Invalid(sp.Child("persistentVolumeName"), *src.PersistentVolumeName, msg))
			}
		default:
			errs = append(errs, validateInlineVolumeSpec(src.InlineVolumeSpec, sp.Child("inlineVolumeSpec"))...)
		}
		for _, msg := range apivalidation.NameIsDNSSubdomain(va.Spec.NodeName, false) {
			errs = append(errs, field.Invalid(p.Child("nodeName"), va.Spec.NodeName, msg))
		}
		return append(errs, validateVolumeAttachmentStatus(&va.Status)...)
	},
	checkUpdate: func(va, old *storagev1.VolumeAttachment) field.ErrorList {
		return immutable(!apiequality.Semantic.DeepEqual(va.Spec, old.Spec), va.Spec, field.NewPath("spec"))
	},
	checkStatus: func(va, _ *storagev1.VolumeAttachment) field.ErrorList {
		return validateVolumeAttachmentStatus(&va.Status)
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Attacher", Type: "string", Format: "name", Description: "The CSI driver that handles this attachment."},
		{Name: "PV", Type: "string", Description: "The persistent volume to attach."},
		{Name: "Node", Type: "string", Description: "The node the volume is attached to."},
		{Name: "Attached", Type: "boolean", Description: "Whether the volume is attached."},
		ageColumn(),
	},
	row: func(va *storagev1.VolumeAttachment, now time.Time) []any {
		pv := ""
		if n := va.Spec.Source.PersistentVolumeName; n != nil {
			pv = *n
		}
		return []any{va.Name, va.Spec.Attacher, pv, va.Spec.NodeName, va.Status.Attached, age(va.CreationTimestamp, now)}
	},
}

var csiStorageCapacityRules = kindRules[*storagev1.CSIStorageCapacity]{
	check: func(c *storagev1.CSIStorageCapacity) field.ErrorList {
		errs := metav1validation.ValidateLabelSelector(c.NodeTopology, metav1validation.LabelSelectorValidationOptions{}, field.NewPath("nodeTopology"))
		for _, msg := range apivalidation.NameIsDNSSubdomain(c.StorageClassName, false) {
			errs = append(errs, field.Invalid(field.NewPath("storageClassName"), c.StorageClassName, msg))
		}
		// Only the capacity: kube-apiserver lets a negative maximumVolumeSize through.
		if c.Capacity != nil && c.Capacity.Sign() < 0 {
			errs = append(errs, field.Invalid(field.NewPath("capacity"), c.Capacity.String(), apivalidation.IsNegativeErrorMsg))
		}
		return errs
	},
	checkUpdate: func(c, old *storagev1.CSIStorageCapacity) field.ErrorList {
		errs := immutable(!apiequality.Semantic.DeepEqual(c.NodeTopology, old.NodeTopology), c.NodeTopology, field.NewPath("nodeTopology"))
		return append(errs, immutable(c.StorageClassName != old.StorageClassName, c.StorageClassName, field.NewPath("storageClassName"))...)
	},
	columns: []metav1.TableColumnDefinition{nameColumn(),
		{Name: "StorageClassName", Type: "string", Description: "The storage class the capacity is for."},
		{Name: "Capacity", Type: "string", Description: "The capacity reported by the CSI driver."},
	},
	row: func(c *storagev1.CSIStorageCapacity, _ time.Time) []any {
		capacity := "<unset>"
		if c.Capacity != nil {
			capacity = c.Capacity.String()
		}
		return []any{c.Name, c.StorageClassName, capacity}
	},
}
