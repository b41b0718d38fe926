package apiserver

import (
	"reflect"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// kindRules is a strategy assembled from the handful of rules most kinds have, so that a
// kind's strategy states only what is particular to it. Every function may be nil.
//
// The status rules follow kube-apiserver's strategies for kinds with a status subresource:
// a create starts with an empty status, a write to the main resource keeps the stored
// status, and a write to /status keeps everything but status.
type kindRules[T runtime.Object] struct {
	// defaults applies the kind's API defaults; it runs on create and on every update, as
	// kube-apiserver defaults every object it decodes.
	defaults func(obj T)
	// onCreate sets what the server owns on create, after defaults.
	onCreate func(obj T, now time.Time)
	// onUpdate sets what the server owns on update, after defaults; old is the stored state.
	onUpdate func(obj, old T, now time.Time)
	// check checks an object on create and on update.
	check func(obj T) field.ErrorList
	// checkUpdate adds the rules that compare with the stored object (immutable fields).
	checkUpdate func(obj, old T) field.ErrorList
	// hasStatus: status is written through the status subresource only.
	hasStatus bool
	// onStatusUpdate copies from old what else a status write may not change (a
	// Deployment's labels), after the rest but status and metadata is copied.
	onStatusUpdate func(obj, old T)
	// checkStatus checks a status write.
	checkStatus func(obj, old T) field.ErrorList
	columns     []metav1.TableColumnDefinition
	row         func(obj T, now time.Time) []any
}

var _ strategy = kindRules[runtime.Object]{}

func (k kindRules[T]) prepareForCreate(obj runtime.Object, now time.Time) {
	o := obj.(T)
	if k.defaults != nil {
		k.defaults(o)
	}
	if k.hasStatus {
		clearField(obj, "Status")
	}
	if k.onCreate != nil {
		k.onCreate(o, now)
	}
}

func (k kindRules[T]) validate(obj runtime.Object) field.ErrorList {
	if k.check == nil {
		return nil
	}
	return k.check(obj.(T))
}

func (k kindRules[T]) prepareForUpdate(obj, old runtime.Object, now time.Time) {
	o := obj.(T)
	if k.defaults != nil {
		k.defaults(o)
	}
	if k.hasStatus {
		copyField(obj, old, "Status")
	}
	if k.onUpdate != nil {
		k.onUpdate(o, old.(T), now)
	}
}

func (k kindRules[T]) validateUpdate(obj, old runtime.Object) field.ErrorList {
	var errs field.ErrorList
	if k.check != nil {
		errs = k.check(obj.(T))
	}
	if k.checkUpdate != nil {
		errs = append(errs, k.checkUpdate(obj.(T), old.(T))...)
	}
	return errs
}

func (k kindRules[T]) prepareForStatusUpdate(obj, old runtime.Object, _ time.Time) {
	if !k.hasStatus {
		return
	}
	if k.defaults != nil {
		k.defaults(obj.(T))
	}
	keepAllButStatus(obj, old)
	if k.onStatusUpdate != nil {
		k.onStatusUpdate(obj.(T), old.(T))
	}
}

func (k kindRules[T]) validateStatusUpdate(obj, old runtime.Object) field.ErrorList {
	if k.checkStatus == nil {
		return nil
	}
	return k.checkStatus(obj.(T), old.(T))
}

func (k kindRules[T]) tableColumns() []metav1.TableColumnDefinition {
	if k.columns == nil {
		return []metav1.TableColumnDefinition{nameColumn(), ageColumn()}
	}
	return k.columns
}

func (k kindRules[T]) tableRow(obj runtime.Object, now time.Time) []any {
	if k.row == nil {
		m := obj.(metav1.Object)
		return []any{m.GetName(), age(m.GetCreationTimestamp(), now)}
	}
	return k.row(obj.(T), now)
}

// clearField sets the named field of the struct obj points to to its zero value.
func clearField(obj runtime.Object, name string) {
	f := reflect.ValueOf(obj).Elem().FieldByName(name)
	if f.IsValid() {
		f.Set(reflect.Zero(f.Type()))
	}
}

// copyField copies the named field from src into dst, two objects of one type.
func copyField(dst, src runtime.Object, name string) {
	d := reflect.ValueOf(dst).Elem().FieldByName(name)
	if d.IsValid() {
		d.Set(reflect.ValueOf(src).Elem().FieldByName(name))
	}
}

// keepAllButStatus copies every top-level field but metadata and status from old into obj:
// what a write to the status subresource may not change. (The handlers restore the
// metadata a status write may not change.)
func keepAllButStatus(obj, old runtime.Object) {
	d, s := reflect.ValueOf(obj).Elem(), reflect.ValueOf(old).Elem()
	t := d.Type()
	for i := 0; i < t.NumField(); i++ {
		switch t.Field(i).Name {
		case "TypeMeta", "ObjectMeta", "Status":
			continue
		}
		d.Field(i).Set(s.Field(i))
	}
}

// immutable reports a changed field as kube-apiserver's ValidateImmutableField does.
func immutable(changed bool, value any, p *field.Path) field.ErrorList {
	if !changed {
		return nil
	}
	return field.ErrorList{field.Invalid(p, value, "field is immutable")}
}
