package apiserver

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// templateGenerationAnnotation is the apps/v1 wire form of a DaemonSet's internal
// spec.templateGeneration: "1" on create, +1 whenever spec.template changes.
const templateGenerationAnnotation = "deprecated.daemonset.template.generation"

// daemonSetStrategy follows pkg/registry/apps/daemonset/strategy.go and
// pkg/apis/apps/validation (docs/daemonset-controller.md#api-rules).
type daemonSetStrategy struct{}

// defaultDaemonSet applies SetDefaults_DaemonSet and the pod-template defaults.
func defaultDaemonSet(ds *appsv1.DaemonSet) {
	if ds.Spec.UpdateStrategy.Type == "" {
		ds.Spec.UpdateStrategy.Type = appsv1.RollingUpdateDaemonSetStrategyType
	}
	if ds.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if ds.Spec.UpdateStrategy.RollingUpdate == nil {
			ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
		}
		ru := ds.Spec.UpdateStrategy.RollingUpdate
		if ru.MaxUnavailable == nil {
			one := intstr.FromInt32(1)
			ru.MaxUnavailable = &one
		}
		if ru.MaxSurge == nil {
			zero := intstr.FromInt32(0)
			ru.MaxSurge = &zero
		}
	}
	if ds.Spec.RevisionHistoryLimit == nil {
		ten := int32(10)
		ds.Spec.RevisionHistoryLimit = &ten
	}
	defaultPodSpec(&ds.Spec.Template.Spec)
}

func (daemonSetStrategy) prepareForCreate(obj runtime.Object, _ time.Time) {
	ds := obj.(*appsv1.DaemonSet)
	defaultDaemonSet(ds)
	ds.Status = appsv1.DaemonSetStatus{}
	if ds.Annotations == nil {
		ds.Annotations = map[string]string{}
	}
	if g, err := strconv.ParseInt(ds.Annotations[templateGenerationAnnotation], 10, 64); err != nil || g < 1 {
		ds.Annotations[templateGenerationAnnotation] = "1"
	}
}

func (daemonSetStrategy) validate(obj runtime.Object) field.ErrorList {
	return validateDaemonSetSpec(obj.(*appsv1.DaemonSet), field.NewPath("spec"))
}

func (daemonSetStrategy) prepareForUpdate(obj, old runtime.Object, _ time.Time) {
	ds, oldDS := obj.(*appsv1.DaemonSet), old.(*appsv1.DaemonSet)
	defaultDaemonSet(ds)
	ds.Status = oldDS.Status
	// The template generation is the server's: the client's value is ignored.
	gen, _ := strconv.ParseInt(oldDS.Annotations[templateGenerationAnnotation], 10, 64)
	if !apiequality.Semantic.DeepEqual(ds.Spec.Template, oldDS.Spec.Template) {
		gen++
	}
	if ds.Annotations == nil {
		ds.Annotations = map[string]string{}
	}
	if gen > 0 {
		ds.Annotations[templateGenerationAnnotation] = strconv.FormatInt(gen, 10)
	} else {
		delete(ds.Annotations, templateGenerationAnnotation)
	}
}

func (daemonSetStrategy) validateUpdate(obj, old runtime.Object) field.ErrorList {
	ds, oldDS := obj.(*appsv1.DaemonSet), old.(*appsv1.DaemonSet)
	errs := validateDaemonSetSpec(ds, field.NewPath("spec"))
	if !apiequality.Semantic.DeepEqual(ds.Spec.Selector, oldDS.Spec.Selector) {
		errs = append(errs, field.Invalid(field.NewPath("spec", "selector"), ds.Spec.Selector, "field is immutable"))
	}
	return errs
}

func (daemonSetStrategy) prepareForStatusUpdate(obj, old runtime.Object, _ time.Time) {
	obj.(*appsv1.DaemonSet).Spec = old.(*appsv1.DaemonSet).Spec
}

func (daemonSetStrategy) validateStatusUpdate(obj, old runtime.Object) field.ErrorList {
	st, oldSt := obj.(*appsv1.DaemonSet).Status, old.(*appsv1.DaemonSet).Status
	p := field.NewPath("status")
	var errs field.ErrorList
	for name, v := range map[string]int64{
		"currentNumberScheduled": int64(st.CurrentNumberScheduled), "numberMisscheduled": int64(st.NumberMisscheduled),
		"desiredNumberScheduled": int64(st.DesiredNumberScheduled), "numberReady": int64(st.NumberReady),
		"observedGeneration": st.ObservedGeneration, "updatedNumberScheduled": int64(st.UpdatedNumberScheduled),
		"numberAvailable": int64(st.NumberAvailable), "numberUnavailable": int64(st.NumberUnavailable),
	} {
		errs = append(errs, apivalidation.ValidateNonnegativeField(v, p.Child(name))...)
	}
	if st.CollisionCount != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(*st.CollisionCount), p.Child("collisionCount"))...)
	}
	if oldSt.CollisionCount != nil && (st.CollisionCount == nil || *st.CollisionCount < *oldSt.CollisionCount) {
		var v any
		if st.CollisionCount != nil {
			v = *st.CollisionCount
		}
		errs = append(errs, field.Invalid(p.Child("collisionCount"), v, "cannot be decremented"))
	}
	return sortErrors(errs)
}

// percentPattern is what an IntOrString percentage must look like.
var percentPattern = regexp.MustCompile(`^[0-9]+%$`)

func validateDaemonSetSpec(ds *appsv1.DaemonSet, p *field.Path) field.ErrorList {
	spec := &ds.Spec
	var errs field.ErrorList
	errs = append(errs, metav1validation.ValidateLabelSelector(spec.Selector, metav1validation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
	selector, err := metav1.LabelSelectorAsSelector(spec.Selector)
	if spec.Selector == nil {
		selector, err = labels.Nothing(), nil
	}
	if err == nil && !selector.Matches(labels.Set(spec.Template.Labels)) {
		errs = append(errs, field.Invalid(p.Child("template", "metadata", "labels"), spec.Template.Labels, "`selector` does not match template `labels`"))
	}
	if spec.Selector != nil && len(spec.Selector.MatchLabels)+len(spec.Selector.MatchExpressions) == 0 {
		errs = append(errs, field.Invalid(p.Child("selector"), spec.Selector, "empty selector is invalid for daemonset"))
	}
	tp := p.Child("template")
	errs = append(errs, metav1validation.ValidateLabels(spec.Template.Labels, tp.Child("metadata", "labels"))...)
	errs = append(errs, apivalidation.ValidateAnnotations(spec.Template.Annotations, tp.Child("metadata", "annotations"))...)
	errs = append(errs, validateTemplateSpec(&spec.Template.Spec, tp.Child("spec"))...)
	if spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(tp.Child("spec", "restartPolicy"), spec.Template.Spec.RestartPolicy, []string{string(corev1.RestartPolicyAlways)}))
	}
	if spec.Template.Spec.ActiveDeadlineSeconds != nil {
		errs = append(errs, field.Forbidden(tp.Child("spec", "activeDeadlineSeconds"), "activeDeadlineSeconds in DaemonSet is not Supported"))
	}
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(spec.MinReadySeconds), p.Child("minReadySeconds"))...)
	if gen, ok := ds.Annotations[templateGenerationAnnotation]; ok {
		if n, err := strconv.ParseInt(gen, 10, 64); err == nil {
			errs = append(errs, apivalidation.ValidateNonnegativeField(n, p.Child("templateGeneration"))...)
		}
	}
	errs = append(errs, validateDaemonSetUpdateStrategy(&spec.UpdateStrategy, p.Child("updateStrategy"))...)
	if spec.RevisionHistoryLimit != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(*spec.RevisionHistoryLimit), p.Child("revisionHistoryLimit"))...)
	}
	return errs
}

func validateDaemonSetUpdateStrategy(s *appsv1.DaemonSetUpdateStrategy, p *field.Path) field.ErrorList {
	switch s.Type {
	case appsv1.OnDeleteDaemonSetStrategyType:
		return nil
	case appsv1.RollingUpdateDaemonSetStrategyType:
	default:
		return field.ErrorList{field.NotSupported(p, s.Type, []string{string(appsv1.RollingUpdateDaemonSetStrategyType), string(appsv1.OnDeleteDaemonSetStrategyType)})}
	}
	if s.RollingUpdate == nil {
		return field.ErrorList{field.Required(p.Child("rollingUpdate"), "")}
	}
	rp := p.Child("rollingUpdate")
	var errs field.ErrorList
	errs = append(errs, validateIntOrPercent(s.RollingUpdate.MaxUnavailable, rp.Child("maxUnavailable"))...)
	errs = append(errs, validateIntOrPercent(s.RollingUpdate.MaxSurge, rp.Child("maxSurge"))...)
	// Like upstream, the exclusivity rules are checked even when a value above was
	// invalid (it then counts as 0), so one request reports every problem.
	unavailableZero := isZeroIntOrPercent(s.RollingUpdate.MaxUnavailable)
	surgeZero := isZeroIntOrPercent(s.RollingUpdate.MaxSurge)
	switch {
	case !unavailableZero && !surgeZero:
		errs = append(errs, field.Invalid(rp.Child("maxSurge"), s.RollingUpdate.MaxSurge.String(), "may not be set when maxUnavailable is non-zero"))
	case unavailableZero && surgeZero:
		errs = append(errs, field.Required(rp.Child("maxUnavailable"), "cannot be 0 when maxSurge is 0"))
	}
	return errs
}

func validateIntOrPercent(v *intstr.IntOrString, p *field.Path) field.ErrorList {
	if v == nil {
		return nil
	}
	switch v.Type {
	case intstr.Int:
		return apivalidation.ValidateNonnegativeField(int64(v.IntVal), p)
	default:
		if !percentPattern.MatchString(v.StrVal) {
			return field.ErrorList{field.Invalid(p, v.StrVal, "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')")}
		}
		n, _ := strconv.Atoi(strings.TrimSuffix(v.StrVal, "%"))
		if n > 100 {
			return field.ErrorList{field.Invalid(p, v.StrVal, "must not be greater than 100%")}
		}
	}
	return nil
}

func isZeroIntOrPercent(v *intstr.IntOrString) bool {
	if v == nil {
		return true
	}
	if v.Type == intstr.Int {
		return v.IntVal == 0
	}
	n, _ := strconv.Atoi(strings.TrimSuffix(v.StrVal, "%"))
	return n == 0
}

func sortErrors(errs field.ErrorList) field.ErrorList {
	for i := 1; i < len(errs); i++ {
		for j := i; j > 0 && errs[j].Field < errs[j-1].Field; j-- {
			errs[j], errs[j-1] = errs[j-1], errs[j]
		}
	}
	return errs
}

func (daemonSetStrategy) tableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		nameColumn(),
		{Name: "Desired", Type: "integer", Description: "The number of nodes that should be running the daemon pod."},
		{Name: "Current", Type: "integer", Description: "The number of nodes running at least one daemon pod and are supposed to."},
		{Name: "Ready", Type: "integer", Description: "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready."},
		{Name: "Up-to-date", Type: "integer", Description: "The total number of nodes that are running updated daemon pod."},
		{Name: "Available", Type: "integer", Description: "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available."},
		{Name: "Node Selector", Type: "string", Description: "NodeSelector is a selector which must be true for the pod to fit on a node."},
		ageColumn(),
		{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
		{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
		{Name: "Selector", Type: "string", Priority: 1, Description: "A label query over pods that are managed by the daemon set."},
	}
}

func (daemonSetStrategy) tableRow(obj runtime.Object, now time.Time) []any {
	ds := obj.(*appsv1.DaemonSet)
	var names, images []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		names, images = append(names, c.Name), append(images, c.Image)
	}
	selector := "<none>"
	if s, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector); err == nil && !s.Empty() {
		selector = s.String()
	}
	return []any{ds.Name, int64(ds.Status.DesiredNumberScheduled), int64(ds.Status.CurrentNumberScheduled),
		int64(ds.Status.NumberReady), int64(ds.Status.UpdatedNumberScheduled), int64(ds.Status.NumberAvailable),
		orNone(labels.FormatLabels(ds.Spec.Template.Spec.NodeSelector)), age(ds.CreationTimestamp, now),
		strings.Join(names, ","), strings.Join(images, ","), selector}
}

// controllerRevisionStrategy: data is required and immutable.
type controllerRevisionStrategy struct{ noStatus }

func (controllerRevisionStrategy) prepareForCreate(runtime.Object, time.Time) {}

func (controllerRevisionStrategy) validate(obj runtime.Object) field.ErrorList {
	cr := obj.(*appsv1.ControllerRevision)
	var errs field.ErrorList
	if cr.Data.Raw == nil && cr.Data.Object == nil {
		errs = append(errs, field.Required(field.NewPath("data"), "data is mandatory"))
	}
	errs = append(errs, apivalidation.ValidateNonnegativeField(cr.Revision, field.NewPath("revision"))...)
	return errs
}

func (controllerRevisionStrategy) prepareForUpdate(runtime.Object, runtime.Object, time.Time) {}

func (s controllerRevisionStrategy) validateUpdate(obj, old runtime.Object) field.ErrorList {
	errs := s.validate(obj)
	if !apiequality.Semantic.DeepEqual(obj.(*appsv1.ControllerRevision).Data, old.(*appsv1.ControllerRevision).Data) {
		errs = append(errs, field.Invalid(field.NewPath("data"), "<data>", "field is immutable"))
	}
	return errs
}

func (controllerRevisionStrategy) tableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		nameColumn(),
		{Name: "Controller", Type: "string", Description: "Controller of the object."},
		{Name: "Revision", Type: "integer", Description: "Revision indicates the revision of the state represented by Data."},
		ageColumn(),
	}
}

func (controllerRevisionStrategy) tableRow(obj runtime.Object, now time.Time) []any {
	cr := obj.(*appsv1.ControllerRevision)
	controller := "<none>"
	if ref := metav1.GetControllerOf(cr); ref != nil {
		gv, _ := runtimeGroup(ref.APIVersion)
		controller = fmt.Sprintf("%s/%s", strings.ToLower(ref.Kind)+gv, ref.Name)
	}
	return []any{cr.Name, controller, cr.Revision, age(cr.CreationTimestamp, now)}
}

// runtimeGroup returns ".<group>" for a grouped apiVersion, as kubectl prints kinds.
func runtimeGroup(apiVersion string) (string, bool) {
	if i := strings.Index(apiVersion, "/"); i > 0 {
		return "." + apiVersion[:i], true
	}
	return "", false
}

// noStatus is embedded by strategies of resources without a status subresource.
type noStatus struct{}

func (noStatus) prepareForStatusUpdate(runtime.Object, runtime.Object, time.Time)    {}
func (noStatus) validateStatusUpdate(runtime.Object, runtime.Object) field.ErrorList { return nil }
