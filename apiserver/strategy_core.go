package apiserver

import (
	"fmt"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// namespaceStrategy: namespaces start Active with the "kubernetes" finalizer; phase and
// spec.finalizers belong to the server.
type namespaceStrategy struct{}

func (namespaceStrategy) prepareForCreate(obj runtime.Object, _ time.Time) {
	ns := obj.(*corev1.Namespace)
	ns.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
	ns.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[corev1.LabelMetadataName] = ns.Name
}

func (namespaceStrategy) validate(runtime.Object) field.ErrorList { return nil }

func (namespaceStrategy) prepareForUpdate(obj, old runtime.Object, _ time.Time) {
	ns, oldNS := obj.(*corev1.Namespace), old.(*corev1.Namespace)
	ns.Spec.Finalizers = oldNS.Spec.Finalizers
	ns.Status = oldNS.Status
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[corev1.LabelMetadataName] = ns.Name
}

func (namespaceStrategy) validateUpdate(runtime.Object, runtime.Object) field.ErrorList { return nil }

func (namespaceStrategy) prepareForStatusUpdate(obj, old runtime.Object, _ time.Time) {
	obj.(*corev1.Namespace).Spec = old.(*corev1.Namespace).Spec
}

func (namespaceStrategy) validateStatusUpdate(runtime.Object, runtime.Object) field.ErrorList {
	return nil
}

// holdsDeletion keeps a namespace marked for deletion until the namespace finalizer has
// emptied it and cleared spec.finalizers.
func (namespaceStrategy) holdsDeletion(obj runtime.Object) bool {
	return len(obj.(*corev1.Namespace).Spec.Finalizers) > 0
}

// namespaceFinalizeSubresource is namespaces/finalize, through which the namespace
// controller (or anyone allowed) edits spec.finalizers, which the main resource keeps as
// stored. Like kube-apiserver it takes metadata and spec and keeps the status; a
// Terminating namespace left with no finalizer of either kind is removed by the write.
var namespaceFinalizeSubresource = subresource{name: "finalize", verbs: metav1.Verbs{"update"},
	rules: &subresourceRules{
		prepare: func(obj, old runtime.Object) {
			obj.(*corev1.Namespace).Status = old.(*corev1.Namespace).Status
		},
		validate: func(obj, _ runtime.Object) field.ErrorList {
			var errs field.ErrorList
			p := field.NewPath("spec", "finalizers")
			for i, f := range obj.(*corev1.Namespace).Spec.Finalizers {
				errs = append(errs, apivalidation.ValidateFinalizerName(string(f), p.Index(i))...)
				if !strings.Contains(string(f), "/") && !standardFinalizers[string(f)] {
					errs = append(errs, field.Invalid(p.Index(i), string(f), "name is neither a standard finalizer name nor is it fully qualified"))
				}
			}
			return errs
		},
	}}

// standardFinalizers are the finalizer names that need no domain prefix.
var standardFinalizers = map[string]bool{
	string(corev1.FinalizerKubernetes): true, metav1.FinalizerOrphanDependents: true, metav1.FinalizerDeleteDependents: true,
}

// namespaceFields are the selectable fields of namespaces.
var namespaceFields = fieldsOf(map[string]func(*corev1.Namespace) string{
	"status.phase": func(ns *corev1.Namespace) string { return string(ns.Status.Phase) },
})

func (namespaceStrategy) tableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Status", Type: "string", Description: "The status of the namespace"}, ageColumn()}
}

func (namespaceStrategy) tableRow(obj runtime.Object, now time.Time) []any {
	ns := obj.(*corev1.Namespace)
	return []any{ns.Name, string(ns.Status.Phase), age(ns.CreationTimestamp, now)}
}

// nodeStrategy: a node may be created with its status (the kubelet registers that way);
// afterwards the main resource keeps status and the status subresource keeps spec.
type nodeStrategy struct{}

func (nodeStrategy) prepareForCreate(obj runtime.Object, _ time.Time) {
	obj.(*corev1.Node).Spec.ConfigSource = nil //nolint:staticcheck // cleared as kube-apiserver does
}

func (nodeStrategy) validate(obj runtime.Object) field.ErrorList {
	return validateNodeSpec(obj.(*corev1.Node))
}

func validateNodeSpec(node *corev1.Node) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec", "taints")
	seen := map[string]bool{}
	for i, t := range node.Spec.Taints {
		tp := p.Index(i)
		for _, msg := range validation.IsQualifiedName(t.Key) {
			errs = append(errs, field.Invalid(tp.Child("key"), t.Key, msg))
		}
		if t.Value != "" {
			for _, msg := range validation.IsValidLabelValue(t.Value) {
				errs = append(errs, field.Invalid(tp.Child("value"), t.Value, msg))
			}
		}
		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		case "":
			errs = append(errs, field.Required(tp.Child("effect"), ""))
		default:
			errs = append(errs, field.NotSupported(tp.Child("effect"), t.Effect, []string{"NoExecute", "NoSchedule", "PreferNoSchedule"}))
		}
		k := t.Key + "/" + string(t.Effect)
		if seen[k] {
			errs = append(errs, field.Duplicate(tp, fmt.Sprintf("taints must be unique by key and effect pair: %s:%s", t.Key, t.Effect)))
		}
		seen[k] = true
	}
	for name, q := range node.Status.Capacity {
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(field.NewPath("status", "capacity").Key(string(name)), q.String(), "must be greater than or equal to 0"))
		}
	}
	for name, q := range node.Status.Allocatable {
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(field.NewPath("status", "allocatable").Key(string(name)), q.String(), "must be greater than or equal to 0"))
		}
	}
	return errs
}

func (nodeStrategy) prepareForUpdate(obj, old runtime.Object, _ time.Time) {
	obj.(*corev1.Node).Status = old.(*corev1.Node).Status
}

func (nodeStrategy) validateUpdate(obj, _ runtime.Object) field.ErrorList {
	return validateNodeSpec(obj.(*corev1.Node))
}

func (nodeStrategy) prepareForStatusUpdate(obj, old runtime.Object, _ time.Time) {
	obj.(*corev1.Node).Spec = old.(*corev1.Node).Spec
}

func (nodeStrategy) validateStatusUpdate(obj, _ runtime.Object) field.ErrorList {
	return validateNodeSpec(obj.(*corev1.Node))
}

// nodeFields are the selectable fields of nodes.
var nodeFields = fieldsOf(map[string]func(*corev1.Node) string{
	"spec.unschedulable": func(n *corev1.Node) string { return fmt.Sprint(n.Spec.Unschedulable) },
})

func (nodeStrategy) tableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		nameColumn(),
		{Name: "Status", Type: "string", Description: "The status of the node"},
		{Name: "Roles", Type: "string", Description: "The roles of the node"},
		ageColumn(),
		{Name: "Version", Type: "string", Description: "Kubelet Version reported by the node."},
		{Name: "Internal-IP", Type: "string", Priority: 1, Description: "List of internal IPs."},
		{Name: "External-IP", Type: "string", Priority: 1, Description: "List of external IPs."},
		{Name: "OS-Image", Type: "string", Priority: 1, Description: "OS Image reported by the node."},
		{Name: "Kernel-Version", Type: "string", Priority: 1, Description: "Kernel Version reported by the node."},
		{Name: "Container-Runtime", Type: "string", Priority: 1, Description: "Container Runtime Version reported by the node."},
	}
}

func (nodeStrategy) tableRow(obj runtime.Object, now time.Time) []any {
	node := obj.(*corev1.Node)
	status := "Unknown"
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			switch c.Status {
			case corev1.ConditionTrue:
				status = "Ready"
			case corev1.ConditionFalse:
				status = "NotReady"
			}
		}
	}
	if node.Spec.Unschedulable {
		status += ",SchedulingDisabled"
	}
	var roles []string
	for k := range node.Labels {
		if r, ok := strings.CutPrefix(k, "node-role.kubernetes.io/"); ok && r != "" {
			roles = append(roles, r)
		}
	}
	sort.Strings(roles)
	internal, external := "<none>", "<none>"
	for _, a := range node.Status.Addresses {
		switch {
		case a.Type == corev1.NodeInternalIP && internal == "<none>":
			internal = a.Address
		case a.Type == corev1.NodeExternalIP && external == "<none>":
			external = a.Address
		}
	}
	info := node.Status.NodeInfo
	return []any{node.Name, status, orNone(strings.Join(roles, ",")), age(node.CreationTimestamp, now), info.KubeletVersion,
		internal, external, orUnknown(info.OSImage), orUnknown(info.KernelVersion), orUnknown(info.ContainerRuntimeVersion)}
}

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}

// leaseStrategy: leases are plain objects (node heartbeats and leader election).
type leaseStrategy struct{ noStatus }

func (leaseStrategy) prepareForCreate(runtime.Object, time.Time) {}

func (leaseStrategy) validate(obj runtime.Object) field.ErrorList {
	l := obj.(*coordinationv1.Lease)
	var errs field.ErrorList
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "leaseDurationSeconds"), *l.Spec.LeaseDurationSeconds, "must be greater than 0"))
	}
	if l.Spec.LeaseTransitions != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(*l.Spec.LeaseTransitions), field.NewPath("spec", "leaseTransitions"))...)
	}
	return errs
}

func (leaseStrategy) prepareForUpdate(runtime.Object, runtime.Object, time.Time) {}

func (s leaseStrategy) validateUpdate(obj, _ runtime.Object) field.ErrorList { return s.validate(obj) }

func (leaseStrategy) tableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{nameColumn(),
		{Name: "Holder", Type: "string", Description: "The holder of the lease."}, ageColumn()}
}

func (leaseStrategy) tableRow(obj runtime.Object, now time.Time) []any {
	l := obj.(*coordinationv1.Lease)
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	return []any{l.Name, holder, age(l.CreationTimestamp, now)}
}
