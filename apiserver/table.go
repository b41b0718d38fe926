package apiserver

import (
	"encoding/json"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// toTable renders objects as the meta.k8s.io Table kubectl get asks for, so that kubectl
// prints the same columns it prints against kube-apiserver. includeObject is None,
// Metadata (the default) or Object, the row's embedded object.
func (s *Server) toTable(res *resource, objs []runtime.Object, out output, includeObject string, listMeta metav1.ListMeta) *metav1.Table {
	version := out.tableVersion
	if version == "" {
		version = "v1"
	}
	t := &metav1.Table{
		TypeMeta:          metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/" + version},
		ListMeta:          listMeta,
		ColumnDefinitions: res.strategy.tableColumns(),
		Rows:              make([]metav1.TableRow, 0, len(objs)),
	}
	now := s.clock.Now()
	for _, obj := range objs {
		row := metav1.TableRow{Cells: res.strategy.tableRow(obj, now)}
		switch includeObject {
		case "None":
		case "Object":
			obj.GetObjectKind().SetGroupVersionKind(res.gvk())
			raw, _ := json.Marshal(obj)
			row.Object = runtime.RawExtension{Raw: raw}
		default:
			raw, _ := json.Marshal(partialMetadata(obj))
			row.Object = runtime.RawExtension{Raw: raw}
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

func nameColumn() metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: "Name must be unique within a namespace."}
}

func ageColumn() metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: "CreationTimestamp is when the object was created."}
}

// age formats the time since t the way kubectl does ("5m10s", "3d").
func age(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
