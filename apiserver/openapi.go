package apiserver

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/gorilla/mux"
)

// OpenAPI v3 documents describe the served paths and their parameters, not the object
// schemas. That is what clients negotiate on: kubectl sends fieldValidation=Strict (and
// skips client-side validation, which would need full schemas) only when the PATCH
// operation of the object's group/version/kind lists a fieldValidation query parameter.
// kubectl apply then computes strategic merge patches from its compiled-in types.

// openAPIDocument returns the document for one group/version.
func (s *Server) openAPIDocument(group, version string) map[string]any {
	paths := map[string]any{}
	for _, res := range s.reg.inGroupVersion(group, version) {
		base := groupVersionPath(group, version)
		gvk := map[string]string{"group": res.group, "version": res.version, "kind": res.kind}
		collection := base + "/" + res.name
		item := collection + "/{name}"
		params := []any{pathParam("name")}
		collParams := []any{}
		if res.namespaced {
			collection = base + "/namespaces/{namespace}/" + res.name
			item = collection + "/{name}"
			params = append(params, pathParam("namespace"))
			collParams = append(collParams, pathParam("namespace"))
		}
		paths[collection] = map[string]any{
			"parameters": collParams,
			"get":        operation("list", gvk, nil),
			"post":       operation("post", gvk, []string{"dryRun", "fieldManager", "fieldValidation"}),
			"delete":     operation("deletecollection", gvk, []string{"dryRun", "gracePeriodSeconds", "propagationPolicy"}),
		}
		paths[item] = map[string]any{
			"parameters": params,
			"get":        operation("get", gvk, nil),
			"put":        operation("put", gvk, []string{"dryRun", "fieldManager", "fieldValidation"}),
			"patch":      patchOperation(gvk),
			"delete":     operation("delete", gvk, []string{"dryRun", "gracePeriodSeconds", "propagationPolicy"}),
		}
		for _, sub := range res.subresources {
			paths[item+"/"+sub.name] = subresourceOperations(res, &sub, params)
		}
	}
	return map[string]any{
		"openapi":    "3.0.0",
		"info":       map[string]any{"title": "Kubernetes", "version": kubernetesVersion},
		"paths":      paths,
		"components": map[string]any{"schemas": map[string]any{}},
	}
}

// subresourceOperations describes the operations of one subresource: one per verb it
// serves, on the kind it takes or returns.
func subresourceOperations(res *resource, sub *subresource, params []any) map[string]any {
	gvk := map[string]string{"group": res.group, "version": res.version, "kind": res.subresourceKind(sub)}
	ops := map[string]any{"parameters": params}
	for _, verb := range sub.verbs {
		switch verb {
		case "get":
			ops["get"] = operation("get", gvk, sub.getParams)
		case "create":
			ops["post"] = operation("post", gvk, []string{"dryRun", "fieldManager", "fieldValidation"})
		case "update":
			ops["put"] = operation("put", gvk, []string{"dryRun", "fieldManager", "fieldValidation"})
		case "patch":
			ops["patch"] = patchOperation(gvk)
		}
	}
	return ops
}

func pathParam(name string) map[string]any {
	return map[string]any{"name": name, "in": "path", "required": true, "schema": map[string]any{"type": "string", "uniqueItems": true}}
}

func queryParam(name string) map[string]any {
	t := "string"
	if name == "gracePeriodSeconds" {
		t = "integer"
	}
	return map[string]any{"name": name, "in": "query", "schema": map[string]any{"type": t, "uniqueItems": true}}
}

func operation(action string, gvk map[string]string, query []string) map[string]any {
	op := map[string]any{
		"x-kubernetes-action":             action,
		"x-kubernetes-group-version-kind": gvk,
		"responses":                       map[string]any{"200": map[string]any{"description": "OK"}},
	}
	if len(query) > 0 {
		var ps []any
		for _, q := range query {
			ps = append(ps, queryParam(q))
		}
		op["parameters"] = ps
	}
	return op
}

func patchOperation(gvk map[string]string) map[string]any {
	op := operation("patch", gvk, []string{"dryRun", "fieldManager", "fieldValidation", "force"})
	content := map[string]any{}
	for _, ct := range []string{"application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json"} {
		content[ct] = map[string]any{"schema": map[string]any{"type": "object"}}
	}
	op["requestBody"] = map[string]any{"content": content, "required": true}
	return op
}

func (s *Server) openAPIBytes(group, version string) []byte {
	data, _ := json.Marshal(s.openAPIDocument(group, version))
	return data
}

func (s *Server) serveOpenAPIRoot(w http.ResponseWriter, _ *http.Request) {
	paths := map[string]any{}
	for _, gv := range s.reg.groupVersions() {
		rel := strings.TrimPrefix(groupVersionPath(gv.Group, gv.Version), "/")
		sum := sha512.Sum512(s.openAPIBytes(gv.Group, gv.Version))
		paths[rel] = map[string]string{"serverRelativeURL": "/openapi/v3/" + rel + "?hash=" + strings.ToUpper(hex.EncodeToString(sum[:]))}
	}
	writeJSON(w, http.StatusOK, map[string]any{"paths": paths})
}

func (s *Server) serveOpenAPIGroupVersion(w http.ResponseWriter, r *http.Request) {
	p := mux.Vars(r)["path"]
	for _, gv := range s.reg.groupVersions() {
		if strings.TrimPrefix(groupVersionPath(gv.Group, gv.Version), "/") == p {
			writeBytes(w, http.StatusOK, s.openAPIBytes(gv.Group, gv.Version), false)
			return
		}
	}
	writeError(w, r, notFoundPath(r), groupResourceNone, "")
}
