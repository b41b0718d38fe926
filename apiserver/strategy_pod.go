package apiserver

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
)

// defaultPodSpec applies core/v1 defaulting (SetDefaults_PodSpec and friends) to a pod
// spec, for pods and for the templates of DaemonSets alike. What upstream defaults on Pod
// objects only is in defaultPodOnly: a template must come out as a real cluster stores it,
// or the ControllerRevision hash of the same manifest would differ from a real cluster's.
func defaultPodSpec(spec *corev1.PodSpec) {
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	if spec.DNSPolicy == "" {
		spec.DNSPolicy = corev1.DNSClusterFirst
	}
	if spec.SchedulerName == "" {
		spec.SchedulerName = corev1.DefaultSchedulerName
	}
	if spec.TerminationGracePeriodSeconds == nil {
		g := int64(corev1.DefaultTerminationGracePeriodSeconds)
		spec.TerminationGracePeriodSeconds = &g
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if spec.HostNetwork {
		// Host-network pods publish their container ports on the host.
		for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
			for i := range cs {
				for j := range cs[i].Ports {
					if cs[i].Ports[j].HostPort == 0 {
						cs[i].Ports[j].HostPort = cs[i].Ports[j].ContainerPort
					}
				}
			}
		}
	}
	for i := range spec.InitContainers {
		defaultContainer(&spec.InitContainers[i])
	}
	for i := range spec.Containers {
		defaultContainer(&spec.Containers[i])
	}
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if v.VolumeSource == (corev1.VolumeSource{}) {
			v.EmptyDir = &corev1.EmptyDirVolumeSource{}
		}
	}
}

func defaultContainer(c *corev1.Container) {
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = defaultPullPolicy(c.Image)
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
}

// defaultPodOnly applies what upstream's SetDefaults_Pod adds for Pod objects, not for pod
// templates: service links on, and limits without requests requested.
func defaultPodOnly(spec *corev1.PodSpec) {
	if spec.EnableServiceLinks == nil {
		t := corev1.DefaultEnableServiceLinks
		spec.EnableServiceLinks = &t
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			c := &cs[i]
			for name, q := range c.Resources.Limits {
				if _, ok := c.Resources.Requests[name]; !ok {
					if c.Resources.Requests == nil {
						c.Resources.Requests = corev1.ResourceList{}
					}
					c.Resources.Requests[name] = q.DeepCopy()
				}
			}
		}
	}
}

// defaultPullPolicy is Always for :latest or untagged images, IfNotPresent otherwise.
func defaultPullPolicy(image string) corev1.PullPolicy {
	if strings.Contains(image, "@") {
		return corev1.PullIfNotPresent
	}
	name := image[strings.LastIndex(image, "/")+1:]
	tag := ""
	if i := strings.LastIndex(name, ":"); i >= 0 {
		tag = name[i+1:]
	}
	if tag == "" || tag == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// defaultTolerationSeconds is what the DefaultTolerationSeconds admission plugin gives every
// pod for the not-ready and unreachable NoExecute taints, so a brief node outage does not
// evict it at once.
const defaultTolerationSeconds = int64(300)

func addDefaultTolerations(spec *corev1.PodSpec) {
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		taint := &corev1.Taint{Key: key, Effect: corev1.TaintEffectNoExecute}
		tolerated := false
		for i := range spec.Tolerations {
			if spec.Tolerations[i].ToleratesTaint(klog.Background(), taint, false) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			secs := defaultTolerationSeconds
			spec.Tolerations = append(spec.Tolerations, corev1.Toleration{
				Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs,
			})
		}
	}
}

// qosClass computes status.qosClass as the API server does on create.
func qosClass(pod *corev1.Pod) corev1.PodQOSClass {
	requests, limits := corev1.ResourceList{}, corev1.ResourceList{}
	guaranteed := true
	any := false
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[name]
			lim, hasLim := c.Resources.Limits[name]
			if hasReq && !req.IsZero() {
				any = true
				q := requests[name]
				q.Add(req)
				requests[name] = q
			}
			if hasLim && !lim.IsZero() {
				any = true
				q := limits[name]
				q.Add(lim)
				limits[name] = q
			}
			if !hasLim || lim.IsZero() {
				guaranteed = false
			}
		}
	}
	if !any {
		return corev1.PodQOSBestEffort
	}
	if guaranteed {
		for name, l := range limits {
			if r, ok := requests[name]; !ok || r.Cmp(l) != 0 {
				guaranteed = false
			}
		}
	}
	if guaranteed && len(limits) == 2 {
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

// validateTemplateSpec is validatePodSpec for the pod template of a workload or a
// PodTemplate, which may not hold ephemeral containers.
func validateTemplateSpec(spec *corev1.PodSpec, path *field.Path) field.ErrorList {
	errs := validatePodSpec(spec, path)
	if len(spec.EphemeralContainers) > 0 {
		errs = append(errs, field.Forbidden(path.Child("ephemeralContainers"), "ephemeral containers not allowed in pod template"))
	}
	return errs
}

// validatePodSpec checks what kubectl users most often get wrong, with Kubernetes' field
// paths and messages. It is not the whole of Kubernetes' pod validation.
func validatePodSpec(spec *corev1.PodSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(spec.Containers) == 0 {
		errs = append(errs, field.Required(path.Child("containers"), ""))
	}
	names := sets.New[string]()
	check := func(cs []corev1.Container, p *field.Path) {
		for i, c := range cs {
			cp := p.Index(i)
			if c.Name == "" {
				errs = append(errs, field.Required(cp.Child("name"), ""))
			} else {
				for _, msg := range validation.IsDNS1123Label(c.Name) {
					errs = append(errs, field.Invalid(cp.Child("name"), c.Name, msg))
				}
				if names.Has(c.Name) {
					errs = append(errs, field.Duplicate(cp.Child("name"), c.Name))
				}
				names.Insert(c.Name)
			}
			if strings.TrimSpace(c.Image) == "" {
				errs = append(errs, field.Required(cp.Child("image"), ""))
			}
			for j, port := range c.Ports {
				pp := cp.Child("ports").Index(j)
				if port.ContainerPort < 1 || port.ContainerPort > 65535 {
					errs = append(errs, field.Invalid(pp.Child("containerPort"), port.ContainerPort, "must be between 1 and 65535, inclusive"))
				}
				if port.HostPort < 0 || port.HostPort > 65535 {
					errs = append(errs, field.Invalid(pp.Child("hostPort"), port.HostPort, "must be between 1 and 65535, inclusive"))
				}
				switch port.Protocol {
				case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
				default:
					errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, []string{"SCTP", "TCP", "UDP"}))
				}
			}
			errs = append(errs, validateResources(c.Resources, cp.Child("resources"))...)
		}
	}
	check(spec.InitContainers, path.Child("initContainers"))
	check(spec.Containers, path.Child("containers"))
	switch spec.RestartPolicy {
	case corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	default:
		errs = append(errs, field.NotSupported(path.Child("restartPolicy"), spec.RestartPolicy, []string{"Always", "Never", "OnFailure"}))
	}
	switch spec.DNSPolicy {
	case corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone:
	default:
		errs = append(errs, field.NotSupported(path.Child("dnsPolicy"), spec.DNSPolicy, []string{"ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"}))
	}
	if spec.NodeName != "" {
		for _, msg := range validation.IsDNS1123Subdomain(spec.NodeName) {
			errs = append(errs, field.Invalid(path.Child("nodeName"), spec.NodeName, msg))
		}
	}
	if spec.TerminationGracePeriodSeconds != nil && *spec.TerminationGracePeriodSeconds < 0 {
		errs = append(errs, field.Invalid(path.Child("terminationGracePeriodSeconds"), *spec.TerminationGracePeriodSeconds, "must be greater than or equal to 0"))
	}
	for k, v := range spec.NodeSelector {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(path.Child("nodeSelector"), k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, field.Invalid(path.Child("nodeSelector").Key(k), v, msg))
		}
	}
	errs = append(errs, validateTolerations(spec.Tolerations, path.Child("tolerations"))...)
	errs = append(errs, validateAffinity(spec.Affinity, path.Child("affinity"))...)
	return errs
}

func validateResources(r corev1.ResourceRequirements, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for name, q := range r.Limits {
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(path.Child("limits").Key(string(name)), q.String(), "must be greater than or equal to 0"))
		}
	}
	for name, q := range r.Requests {
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(path.Child("requests").Key(string(name)), q.String(), "must be greater than or equal to 0"))
		}
		if lim, ok := r.Limits[name]; ok && q.Cmp(lim) > 0 {
			errs = append(errs, field.Invalid(path.Child("requests").Key(string(name)), q.String(),
				fmt.Sprintf("must be less than or equal to %s limit of %s", name, lim.String())))
		}
	}
	return errs
}

func validateTolerations(tols []corev1.Toleration, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, t := range tols {
		p := path.Index(i)
		if t.Key != "" {
			for _, msg := range validation.IsQualifiedName(t.Key) {
				errs = append(errs, field.Invalid(p.Child("key"), t.Key, msg))
			}
		}
		switch t.Operator {
		case corev1.TolerationOpEqual, "":
			if t.Key == "" {
				errs = append(errs, field.Invalid(p.Child("operator"), t.Operator, "operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
			}
		case corev1.TolerationOpExists:
			if t.Value != "" {
				errs = append(errs, field.Invalid(p.Child("operator"), t.Value, "value must be empty when `operator` is 'Exists'"))
			}
		default:
			errs = append(errs, field.NotSupported(p.Child("operator"), t.Operator, []string{"Equal", "Exists"}))
		}
		switch t.Effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect, []string{"NoExecute", "NoSchedule", "PreferNoSchedule"}))
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			errs = append(errs, field.Invalid(p.Child("effect"), t.Effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
		}
	}
	return errs
}

func validateAffinity(a *corev1.Affinity, path *field.Path) field.ErrorList {
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	var errs field.ErrorList
	p := path.Child("nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		errs = append(errs, field.Required(p.Child("nodeSelectorTerms"), "must have at least one node selector term"))
	}
	for i, term := range terms {
		tp := p.Child("nodeSelectorTerms").Index(i)
		for j, req := range term.MatchExpressions {
			errs = append(errs, validateNodeSelectorRequirement(req, tp.Child("matchExpressions").Index(j))...)
		}
		for j, req := range term.MatchFields {
			rp := tp.Child("matchFields").Index(j)
			if req.Key != "metadata.name" {
				errs = append(errs, field.Invalid(rp.Child("key"), req.Key, "not a valid field selector key"))
			}
			if req.Operator != corev1.NodeSelectorOpIn && req.Operator != corev1.NodeSelectorOpNotIn {
				errs = append(errs, field.Invalid(rp.Child("operator"), req.Operator, "not a valid selector operator"))
			}
			if len(req.Values) != 1 {
				errs = append(errs, field.Required(rp.Child("values"), "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"))
			}
		}
	}
	return errs
}

func validateNodeSelectorRequirement(req corev1.NodeSelectorRequirement, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch req.Operator {
	case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
		if len(req.Values) == 0 {
			errs = append(errs, field.Required(path.Child("values"), "must be specified when `operator` is 'In' or 'NotIn'"))
		}
	case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
		if len(req.Values) > 0 {
			errs = append(errs, field.Forbidden(path.Child("values"), "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
		}
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if len(req.Values) != 1 {
			errs = append(errs, field.Required(path.Child("values"), "must be specified single value when `operator` is 'Lt' or 'Gt'"))
		}
	default:
		errs = append(errs, field.Invalid(path.Child("operator"), req.Operator, "not a valid selector operator"))
	}
	for _, msg := range validation.IsQualifiedName(req.Key) {
		errs = append(errs, field.Invalid(path.Child("key"), req.Key, msg))
	}
	return errs
}

// podStrategy: pods. Creates start Pending; the main resource keeps status; spec is
// immutable but for the fields Kubernetes lets an update change.
type podStrategy struct{}

func (podStrategy) prepareForCreate(obj runtime.Object, now time.Time) {
	pod := obj.(*corev1.Pod)
	defaultPodSpec(&pod.Spec)
	defaultPodOnly(&pod.Spec)
	addDefaultTolerations(&pod.Spec)
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: qosClass(pod)}
	if pod.Spec.NodeName != "" {
		// A pod created bound skips the scheduler, which would have recorded this.
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(now.Truncate(time.Second))}}
	}
}

func (podStrategy) validate(obj runtime.Object) field.ErrorList {
	spec := &obj.(*corev1.Pod).Spec
	errs := validatePodSpec(spec, field.NewPath("spec"))
	if len(spec.EphemeralContainers) > 0 {
		// They are added to a pod that exists, through pods/ephemeralcontainers.
		errs = append(errs, field.Forbidden(field.NewPath("spec", "ephemeralContainers"), "cannot be set on create"))
	}
	return errs
}

func (podStrategy) prepareForUpdate(obj, old runtime.Object, _ time.Time) {
	pod := obj.(*corev1.Pod)
	defaultPodSpec(&pod.Spec)
	defaultPodOnly(&pod.Spec)
	pod.Status = old.(*corev1.Pod).Status
}

// validateUpdate allows only image changes, activeDeadlineSeconds, added tolerations and
// terminationGracePeriodSeconds, as Kubernetes does.
func (podStrategy) validateUpdate(obj, old runtime.Object) field.ErrorList {
	pod, oldPod := obj.(*corev1.Pod), old.(*corev1.Pod)
	errs := validatePodSpec(&pod.Spec, field.NewPath("spec"))
	a, b := pod.Spec.DeepCopy(), oldPod.Spec.DeepCopy()
	for i := range a.Containers {
		if i < len(b.Containers) {
			a.Containers[i].Image = b.Containers[i].Image
		}
	}
	for i := range a.InitContainers {
		if i < len(b.InitContainers) {
			a.InitContainers[i].Image = b.InitContainers[i].Image
		}
	}
	a.ActiveDeadlineSeconds = b.ActiveDeadlineSeconds
	a.TerminationGracePeriodSeconds = b.TerminationGracePeriodSeconds
	if len(a.Tolerations) >= len(b.Tolerations) && apiequality.Semantic.DeepEqual(a.Tolerations[:len(b.Tolerations)], b.Tolerations) {
		a.Tolerations = b.Tolerations
	}
	if !apiequality.Semantic.DeepEqual(a, b) {
		errs = append(errs, field.Forbidden(field.NewPath("spec"),
			"pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"))
	}
	return errs
}

// prepareForStatusUpdate keeps the spec and, as kube-apiserver's pod status strategy, the
// owners: a kubelet's status write must not detach a pod from its controller.
func (podStrategy) prepareForStatusUpdate(obj, old runtime.Object, _ time.Time) {
	pod, oldPod := obj.(*corev1.Pod), old.(*corev1.Pod)
	pod.Spec = oldPod.Spec
	pod.OwnerReferences = oldPod.OwnerReferences
}

func (podStrategy) validateStatusUpdate(obj, old runtime.Object) field.ErrorList {
	pod := obj.(*corev1.Pod)
	var errs field.ErrorList
	switch pod.Status.Phase {
	case "", corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("status", "phase"), pod.Status.Phase, []string{"Failed", "Pending", "Running", "Succeeded", "Unknown"}))
	}
	oldPhase := old.(*corev1.Pod).Status.Phase
	if (oldPhase == corev1.PodFailed || oldPhase == corev1.PodSucceeded) && pod.Status.Phase != oldPhase {
		errs = append(errs, field.Forbidden(field.NewPath("status", "phase"),
			fmt.Sprintf("cannot transition from terminal phase %q to %q", oldPhase, pod.Status.Phase)))
	}
	return errs
}

// gracePeriod: a pod bound to a node and still running lingers until its kubelet has
// stopped it; an unbound or finished pod goes at once.
func (podStrategy) gracePeriod(obj runtime.Object, opts *metav1.DeleteOptions) int64 {
	pod := obj.(*corev1.Pod)
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return 0
	}
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	if opts.GracePeriodSeconds != nil {
		grace = *opts.GracePeriodSeconds
	}
	if grace < 0 {
		grace = 1 // a negative request still waits for the kubelet, as in kube-apiserver
	}
	return grace
}

// podFields are the selectable fields of pods, as kube-apiserver offers them.
var podFields = fieldsOf(map[string]func(*corev1.Pod) string{
	"spec.nodeName":            func(p *corev1.Pod) string { return p.Spec.NodeName },
	"spec.restartPolicy":       func(p *corev1.Pod) string { return string(p.Spec.RestartPolicy) },
	"spec.schedulerName":       func(p *corev1.Pod) string { return p.Spec.SchedulerName },
	"spec.serviceAccountName":  func(p *corev1.Pod) string { return p.Spec.ServiceAccountName },
	"spec.hostNetwork":         func(p *corev1.Pod) string { return fmt.Sprint(p.Spec.HostNetwork) },
	"status.phase":             func(p *corev1.Pod) string { return string(p.Status.Phase) },
	"status.podIP":             func(p *corev1.Pod) string { return p.Status.PodIP },
	"status.nominatedNodeName": func(p *corev1.Pod) string { return p.Status.NominatedNodeName },
})

func (podStrategy) tableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		nameColumn(),
		{Name: "Ready", Type: "string", Description: "The aggregate readiness state of this pod for accepting traffic."},
		{Name: "Status", Type: "string", Description: "The aggregate status of the containers in this pod."},
		{Name: "Restarts", Type: "string", Description: "The number of times the containers in this pod have been restarted."},
		ageColumn(),
		{Name: "IP", Type: "string", Priority: 1, Description: "IP address allocated to the pod."},
		{Name: "Node", Type: "string", Priority: 1, Description: "Name of the node where the pod runs."},
		{Name: "Nominated Node", Type: "string", Priority: 1, Description: "Nominated node name, if any."},
		{Name: "Readiness Gates", Type: "string", Priority: 1, Description: "Pod readiness gates."},
	}
}

func (podStrategy) tableRow(obj runtime.Object, now time.Time) []any {
	pod := obj.(*corev1.Pod)
	ready, restarts := 0, int32(0)
	reason := string(pod.Status.Phase)
	if pod.Status.Reason != "" {
		reason = pod.Status.Reason
	}
	initializing := false
	if r, ok := initContainersReason(pod); ok {
		reason, initializing = r, true
	}
	for _, cs := range pod.Status.ContainerStatuses {
		restarts += cs.RestartCount
		switch {
		case initializing && cs.State.Running == nil:
			// Not started: the init container that holds it back speaks.
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "":
			reason = cs.State.Waiting.Reason
		case cs.State.Terminated != nil && cs.State.Terminated.Reason != "":
			reason = cs.State.Terminated.Reason
		case cs.State.Terminated != nil:
			reason = fmt.Sprintf("ExitCode:%d", cs.State.Terminated.ExitCode)
		case cs.Ready && cs.State.Running != nil:
			ready++
		}
	}
	if pod.DeletionTimestamp != nil {
		reason = "Terminating"
	}
	nominated := pod.Status.NominatedNodeName
	return []any{pod.Name, fmt.Sprintf("%d/%d", ready, len(pod.Spec.Containers)), reason, int64(restarts),
		age(pod.CreationTimestamp, now), orNone(pod.Status.PodIP), orNone(pod.Spec.NodeName), orNone(nominated), "<none>"}
}
