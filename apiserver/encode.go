package apiserver

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// outputKind is the shape a client asked for in its Accept header.
type outputKind int

const (
	outputObject   outputKind = iota // the object (or list) itself
	outputTable                      // meta.k8s.io Table, what kubectl get asks for
	outputMetadata                   // PartialObjectMetadata(List), what metadata informers ask for
)

// output is the negotiated response format.
type output struct {
	kind outputKind
	// tableVersion is v1 or v1beta1 for tables.
	tableVersion string
	yaml         bool
	// protobuf serves objects, lists and watches in Kubernetes' protobuf encoding.
	protobuf bool
}

// negotiate reads the Accept header. Media types are tried in order: JSON, YAML and
// protobuf are served (CBOR is not), and a header naming nothing we serve gets 406 so the
// client knows why.
func negotiate(r *http.Request) (output, error) {
	return negotiateAccept(r.Header.Get("Accept"))
}

// negotiateObject is negotiate for endpoints whose answers have no Table or metadata form
// (the reviews): media types asking for one are not acceptable there, as kube-apiserver's
// negotiation finds for a backend without a table converter, and a header naming nothing
// else gets 406.
func negotiateObject(r *http.Request) (output, error) {
	accept := r.Header.Get("Accept")
	if accept == "" {
		return output{}, nil
	}
	var kept []string
	for _, part := range strings.Split(accept, ",") {
		if _, params, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && params["as"] != "" {
			continue
		}
		kept = append(kept, part)
	}
	if len(kept) == 0 {
		return output{}, notAcceptable("only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf")
	}
	return negotiateAccept(strings.Join(kept, ","))
}

func negotiateAccept(accept string) (output, error) {
	if accept == "" {
		return output{}, nil
	}
	for _, part := range strings.Split(accept, ",") {
		mediaType, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mediaType {
		case "application/json", "*/*", "application/*":
		case protobufMediaType:
			if params["as"] == "" {
				return output{protobuf: true}, nil
			}
			continue // tables and metadata are served in JSON only
		case "application/yaml":
			if params["as"] == "" {
				return output{yaml: true}, nil
			}
			continue
		default:
			continue
		}
		switch params["as"] {
		case "":
			return output{}, nil
		case "Table":
			if params["g"] == "meta.k8s.io" && (params["v"] == "v1" || params["v"] == "v1beta1") {
				return output{kind: outputTable, tableVersion: params["v"]}, nil
			}
		case "PartialObjectMetadata", "PartialObjectMetadataList":
			if params["g"] == "meta.k8s.io" && (params["v"] == "v1" || params["v"] == "v1beta1") {
				return output{kind: outputMetadata}, nil
			}
		}
	}
	return output{}, notAcceptable("only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/json;as=Table;g=meta.k8s.io;v=v1, application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
}

// writeJSON encodes v as the response body.
func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeBytes(w, code, data, false)
}

// writeBytes writes an encoded JSON body, converting it to YAML when asked.
func writeBytes(w http.ResponseWriter, code int, data []byte, asYAML bool) {
	if asYAML {
		if y, err := yaml.JSONToYAML(data); err == nil {
			w.Header().Set("Content-Type", "application/yaml")
			w.WriteHeader(code)
			_, _ = w.Write(y)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(data)
	if len(data) > 0 && data[len(data)-1] != '\n' {
		_, _ = w.Write([]byte{'\n'})
	}
}

// writeOutput writes v in the negotiated format.
func writeOutput(w http.ResponseWriter, out output, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeBytes(w, code, data, out.yaml)
}

// listJSON assembles a list response from already-encoded items, so that lists served
// from the watch cache reuse each object's cached encoding instead of re-marshalling it.
func listJSON(kind, apiVersion string, listMeta metav1.ListMeta, items [][]byte) []byte {
	metaJSON, _ := json.Marshal(listMeta)
	size := 64 + len(metaJSON)
	for _, it := range items {
		size += len(it) + 1
	}
	var b bytes.Buffer
	b.Grow(size)
	b.WriteString(`{"kind":`)
	kindJSON, _ := json.Marshal(kind)
	b.Write(kindJSON)
	b.WriteString(`,"apiVersion":`)
	avJSON, _ := json.Marshal(apiVersion)
	b.Write(avJSON)
	b.WriteString(`,"metadata":`)
	b.Write(metaJSON)
	b.WriteString(`,"items":[`)
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(it)
	}
	b.WriteString("]}")
	return b.Bytes()
}
