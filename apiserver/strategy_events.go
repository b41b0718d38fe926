package apiserver

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Events are served in two groups from one storage, as kube-apiserver serves them: core/v1
// (what client-go's record package and kubectl describe use) and events.k8s.io/v1 (what
// client-go's events package, kube-scheduler and controller-runtime's GetEventRecorder
// write). etcd holds core/v1 Events; the events.k8s.io/v1 resource is a storageView of
// them. Both run upstream's event validation on the core form: the lenient rules for
// core/v1 writes, the strict ones for events.k8s.io/v1 writes.

// Limits of the fields an events.k8s.io/v1 Event (or a core/v1 one with eventTime) names.
const (
	eventReportingInstanceLimit = 128
	eventActionLimit            = 128
	eventReasonLimit            = 128
	eventNoteLimit              = 1024
)

// eventStrategy: core/v1 events are written by controllers and expire after the event TTL.
type eventStrategy struct{ noStatus }

func (eventStrategy) prepareForCreate(runtime.Object, time.Time) {}

func (eventStrategy) validate(obj runtime.Object) field.ErrorList {
	return validateEvent(obj.(*corev1.Event), false)
}

func (eventStrategy) prepareForUpdate(runtime.Object, runtime.Object, time.Time) {}

func (eventStrategy) validateUpdate(obj, old runtime.Object) field.ErrorList {
	return validateEventUpdate(obj.(*corev1.Event), old.(*corev1.Event), false)
}

// eventsV1Strategy: events.k8s.io/v1 Events, checked and shown as their core/v1 form.
type eventsV1Strategy struct{ noStatus }

func (eventsV1Strategy) prepareForCreate(runtime.Object, time.Time) {}

func (eventsV1Strategy) validate(obj runtime.Object) field.ErrorList {
	return validateEvent(eventToCore(obj.(*eventsv1.Event)), true)
}

func (eventsV1Strategy) prepareForUpdate(runtime.Object, runtime.Object, time.Time) {}

func (eventsV1Strategy) validateUpdate(obj, old runtime.Object) field.ErrorList {
	return validateEventUpdate(eventToCore(obj.(*eventsv1.Event)), eventToCore(old.(*eventsv1.Event)), true)
}

func (eventsV1Strategy) tableColumns() []metav1.TableColumnDefinition {
	return eventStrategy{}.tableColumns()
}

func (eventsV1Strategy) tableRow(obj runtime.Object, now time.Time) []any {
	return eventStrategy{}.tableRow(eventToCore(obj.(*eventsv1.Event)), now)
}

// validateEvent checks a new event, in its core form. Every event gets the legacy rules;
// strict adds those of events.k8s.io/v1 writes (a reporter, an action, an eventTime, and
// none of the deprecated core fields).
func validateEvent(ev *corev1.Event, strict bool) field.ErrorList {
	errs := legacyEventErrors(ev, strict)
	if !strict {
		return errs
	}
	errs = append(errs, eventSeriesErrors(ev)...)
	if ev.EventTime.IsZero() {
		errs = append(errs, field.Required(field.NewPath("eventTime"), ""))
	}
	if ev.Type != corev1.EventTypeNormal && ev.Type != corev1.EventTypeWarning {
		errs = append(errs, field.Invalid(field.NewPath("type"), "", fmt.Sprintf("has invalid value: %v", ev.Type)))
	}
	for _, unset := range []struct {
		path string
		set  bool
	}{
		{"firstTimestamp", !ev.FirstTimestamp.IsZero()},
		{"lastTimestamp", !ev.LastTimestamp.IsZero()},
		{"count", ev.Count != 0},
		{"source", ev.Source.Component != "" || ev.Source.Host != ""},
	} {
		if unset.set {
			errs = append(errs, field.Invalid(field.NewPath(unset.path), "", "needs to be unset"))
		}
	}
	return errs
}

// validateEventUpdate checks a changed event, in its core form. Through events.k8s.io/v1
// (strict) only the series and metadata may change.
func validateEventUpdate(ev, old *corev1.Event, strict bool) field.ErrorList {
	errs := legacyEventErrors(ev, strict)
	if !strict {
		return errs
	}
	if !reflect.DeepEqual(ev.Series, old.Series) {
		errs = append(errs, eventSeriesErrors(ev)...)
	}
	for _, f := range []struct {
		path     string
		new, old any
	}{
		{"involvedObject", ev.InvolvedObject, old.InvolvedObject},
		{"reason", ev.Reason, old.Reason},
		{"message", ev.Message, old.Message},
		{"source", ev.Source, old.Source},
		{"firstTimestamp", ev.FirstTimestamp, old.FirstTimestamp},
		{"lastTimestamp", ev.LastTimestamp, old.LastTimestamp},
		{"count", ev.Count, old.Count},
		{"type", ev.Type, old.Type},
		// Below a microsecond eventTime may change: clients that encode it with
		// nanoseconds, or truncate it, send back what they read a little differently.
		{"eventTime", ev.EventTime.Truncate(time.Microsecond).UTC(), old.EventTime.Truncate(time.Microsecond).UTC()},
		{"action", ev.Action, old.Action},
		{"related", ev.Related, old.Related},
		{"reportingController", ev.ReportingController, old.ReportingController},
		{"reportingInstance", ev.ReportingInstance, old.ReportingInstance},
	} {
		if !reflect.DeepEqual(f.new, f.old) {
			errs = append(errs, field.Invalid(field.NewPath(f.path), f.new, "field is immutable"))
		}
	}
	return errs
}

// legacyEventErrors are the rules every event meets, whichever group writes it. An event
// without eventTime is an old-style one: its namespace follows its object's. One with
// eventTime is new-style: it names its reporter and action, within upstream's limits. The
// reporter is named as the writer's group names it (core/v1 selects on it as
// reportingComponent).
func legacyEventErrors(ev *corev1.Event, eventsGroup bool) field.ErrorList {
	var errs field.ErrorList
	reporter := field.NewPath("reportingComponent")
	if eventsGroup {
		reporter = field.NewPath("reportingController")
	}
	involvedNS := field.NewPath("involvedObject", "namespace")
	if ev.EventTime.IsZero() {
		// Events about cluster-scoped objects live in "default" (or nowhere), as client-go's
		// recorder puts them.
		if ev.InvolvedObject.Namespace == "" {
			if ev.Namespace != metav1.NamespaceNone && ev.Namespace != metav1.NamespaceDefault {
				errs = append(errs, field.Invalid(involvedNS, ev.InvolvedObject.Namespace, "does not match event.namespace"))
			}
		} else if ev.Namespace != ev.InvolvedObject.Namespace {
			errs = append(errs, field.Invalid(involvedNS, ev.InvolvedObject.Namespace, "does not match event.namespace"))
		}
	} else {
		if ev.InvolvedObject.Namespace == "" && ev.Namespace != metav1.NamespaceDefault && ev.Namespace != metav1.NamespaceSystem {
			errs = append(errs, field.Invalid(involvedNS, ev.InvolvedObject.Namespace, "does not match event.namespace"))
		}
		if ev.ReportingController == "" {
			errs = append(errs, field.Required(reporter, ""))
		}
		for _, msg := range validation.IsQualifiedName(ev.ReportingController) {
			errs = append(errs, field.Invalid(reporter, ev.ReportingController, msg))
		}
		errs = append(errs, requiredWithin(field.NewPath("reportingInstance"), ev.ReportingInstance, eventReportingInstanceLimit)...)
		errs = append(errs, requiredWithin(field.NewPath("action"), ev.Action, eventActionLimit)...)
		errs = append(errs, requiredWithin(field.NewPath("reason"), ev.Reason, eventReasonLimit)...)
		if len(ev.Message) > eventNoteLimit {
			errs = append(errs, field.Invalid(field.NewPath("message"), "", fmt.Sprintf("can have at most %v characters", eventNoteLimit)))
		}
	}
	if ev.Count < 0 {
		errs = append(errs, field.Invalid(field.NewPath("count"), ev.Count, "must be greater than or equal to 0"))
	}
	return errs
}

// requiredWithin: value must be set and at most limit bytes long.
func requiredWithin(path *field.Path, value string, limit int) field.ErrorList {
	switch {
	case value == "":
		return field.ErrorList{field.Required(path, "")}
	case len(value) > limit:
		return field.ErrorList{field.Invalid(path, "", fmt.Sprintf("can have at most %v characters", limit))}
	}
	return nil
}

// eventSeriesErrors: a series counts at least two occurrences and says when it saw the
// last one.
func eventSeriesErrors(ev *corev1.Event) field.ErrorList {
	if ev.Series == nil {
		return nil
	}
	var errs field.ErrorList
	if ev.Series.Count < 2 {
		errs = append(errs, field.Invalid(field.NewPath("series", "count"), "", "should be at least 2"))
	}
	if ev.Series.LastObservedTime.IsZero() {
		errs = append(errs, field.Required(field.NewPath("series", "lastObservedTime"), ""))
	}
	return errs
}

// eventToCore is ev in its core/v1 form. The two forms hold the same fields under other
// names, so the conversion loses nothing either way. The result shares what ev points to
// (metadata maps, related): neither may be changed while the other is in use.
func eventToCore(ev *eventsv1.Event) *corev1.Event {
	out := &corev1.Event{
		TypeMeta:            metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		ObjectMeta:          ev.ObjectMeta,
		InvolvedObject:      ev.Regarding,
		Reason:              ev.Reason,
		Message:             ev.Note,
		Source:              ev.DeprecatedSource,
		FirstTimestamp:      ev.DeprecatedFirstTimestamp,
		LastTimestamp:       ev.DeprecatedLastTimestamp,
		Count:               ev.DeprecatedCount,
		Type:                ev.Type,
		EventTime:           ev.EventTime,
		Action:              ev.Action,
		Related:             ev.Related,
		ReportingController: ev.ReportingController,
		ReportingInstance:   ev.ReportingInstance,
	}
	if s := ev.Series; s != nil {
		out.Series = &corev1.EventSeries{Count: s.Count, LastObservedTime: s.LastObservedTime}
	}
	return out
}

// eventFromCore is ev in its events.k8s.io/v1 form; see eventToCore.
func eventFromCore(ev *corev1.Event) *eventsv1.Event {
	out := &eventsv1.Event{
		TypeMeta:                 metav1.TypeMeta{APIVersion: eventsv1.SchemeGroupVersion.String(), Kind: "Event"},
		ObjectMeta:               ev.ObjectMeta,
		EventTime:                ev.EventTime,
		ReportingController:      ev.ReportingController,
		ReportingInstance:        ev.ReportingInstance,
		Action:                   ev.Action,
		Reason:                   ev.Reason,
		Regarding:                ev.InvolvedObject,
		Related:                  ev.Related,
		Note:                     ev.Message,
		Type:                     ev.Type,
		DeprecatedSource:         ev.Source,
		DeprecatedFirstTimestamp: ev.FirstTimestamp,
		DeprecatedLastTimestamp:  ev.LastTimestamp,
		DeprecatedCount:          ev.Count,
	}
	if s := ev.Series; s != nil {
		out.Series = &eventsv1.EventSeries{Count: s.Count, LastObservedTime: s.LastObservedTime}
	}
	return out
}

// eventsV1View serves events.k8s.io/v1 Events from the core/v1 Events in storage. Its
// field selectors use the new names (no "source": an events.k8s.io Event has a reporter).
func eventsV1View(coreEvents *resource) *storageView {
	return &storageView{
		storage:     coreEvents,
		toStorage:   func(obj runtime.Object) runtime.Object { return eventToCore(obj.(*eventsv1.Event)) },
		fromStorage: func(obj runtime.Object) runtime.Object { return eventFromCore(obj.(*corev1.Event)) },
		fieldLabels: map[string]string{
			"regarding.kind":            "involvedObject.kind",
			"regarding.namespace":       "involvedObject.namespace",
			"regarding.name":            "involvedObject.name",
			"regarding.uid":             "involvedObject.uid",
			"regarding.apiVersion":      "involvedObject.apiVersion",
			"regarding.resourceVersion": "involvedObject.resourceVersion",
			"regarding.fieldPath":       "involvedObject.fieldPath",
			"reason":                    "reason",
			"reportingController":       "reportingComponent",
			"type":                      "type",
		},
	}
}

// eventFields are the selectable fields of core/v1 events, as kube-apiserver offers them.
var eventFields = fieldsOf(map[string]func(*corev1.Event) string{
	"involvedObject.kind":            func(ev *corev1.Event) string { return ev.InvolvedObject.Kind },
	"involvedObject.namespace":       func(ev *corev1.Event) string { return ev.InvolvedObject.Namespace },
	"involvedObject.name":            func(ev *corev1.Event) string { return ev.InvolvedObject.Name },
	"involvedObject.uid":             func(ev *corev1.Event) string { return string(ev.InvolvedObject.UID) },
	"involvedObject.apiVersion":      func(ev *corev1.Event) string { return ev.InvolvedObject.APIVersion },
	"involvedObject.resourceVersion": func(ev *corev1.Event) string { return ev.InvolvedObject.ResourceVersion },
	"involvedObject.fieldPath":       func(ev *corev1.Event) string { return ev.InvolvedObject.FieldPath },
	"reason":                         func(ev *corev1.Event) string { return ev.Reason },
	"reportingComponent":             func(ev *corev1.Event) string { return ev.ReportingController },
	"source":                         eventSourceField,
	"type":                           func(ev *corev1.Event) string { return ev.Type },
})

// eventSourceField is the "source" field: events written through events.k8s.io name their
// reporter instead of a source.
func eventSourceField(ev *corev1.Event) string {
	if ev.Source.Component == "" {
		return ev.ReportingController
	}
	return ev.Source.Component
}

func (eventStrategy) tableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		{Name: "Last Seen", Type: "string", Description: "The last time the event was seen."},
		{Name: "Type", Type: "string", Description: "Type of this event (Normal, Warning)."},
		{Name: "Reason", Type: "string", Description: "Why the action was taken."},
		{Name: "Object", Type: "string", Description: "The object the event is about."},
		{Name: "Message", Type: "string", Description: "A human-readable description of the status of this operation."},
		{Name: "Subobject", Type: "string", Priority: 1, Description: "The field of the object the event is about."},
		{Name: "Source", Type: "string", Priority: 1, Description: "The component reporting this event."},
		{Name: "First Seen", Type: "string", Priority: 1, Description: "The first time the event was seen."},
		{Name: "Count", Type: "string", Priority: 1, Description: "The number of times this event has occurred."},
		{Name: "Name", Type: "string", Format: "name", Priority: 1, Description: "The name of the event."},
	}
}

// tableRow shows old-style and new-style events alike: a new-style one has eventTime
// instead of first and last timestamps, a series instead of a count, and a reporter
// instead of a source.
func (eventStrategy) tableRow(obj runtime.Object, now time.Time) []any {
	ev := obj.(*corev1.Event)
	first := ev.FirstTimestamp
	if first.IsZero() {
		first = metav1.NewTime(ev.EventTime.Time)
	}
	if first.IsZero() {
		first = ev.CreationTimestamp
	}
	last := ev.LastTimestamp
	if last.IsZero() {
		last = first
	}
	count := ev.Count
	if s := ev.Series; s != nil {
		last, count = metav1.NewTime(s.LastObservedTime.Time), s.Count
	} else if count == 0 {
		count = 1 // a single new-style event has no count
	}
	object := strings.ToLower(ev.InvolvedObject.Kind)
	if ev.InvolvedObject.Name != "" {
		object += "/" + ev.InvolvedObject.Name
	}
	source := ev.Source.Component
	if source == "" {
		source = ev.ReportingController
	}
	if ev.Source.Host != "" {
		source += ", " + ev.Source.Host
	}
	return []any{age(last, now), ev.Type, ev.Reason, object, strings.TrimSpace(ev.Message),
		ev.InvolvedObject.FieldPath, source, age(first, now), fmt.Sprint(count), ev.Name}
}
