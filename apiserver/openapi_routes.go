package apiserver

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	endpointsopenapi "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/util"
)

// The OpenAPI documents describe what the registry serves the way kube-apiserver's endpoint
// installer describes its resources: the same paths, operation IDs, actions, parameters and
// media types, so that clients reading them (kubectl's field-validation check, its explain,
// generated clients) find what they find on a cluster. The routes below are what
// kube-openapi's builders turn into documents (common.RouteContainer, common.Route); the
// schemas come from the generated definitions (apiserver/internal/openapidefs), and the
// query parameters' descriptions from the definitions of the option types that carry them,
// so nothing here restates the API's documentation.

// Media types, as kube-apiserver lists them (without CBOR, which miniplane does not serve).
var (
	objectMediaTypes = []string{"application/json", "application/yaml", protobufMediaType}
	watchMediaTypes  = append(slices.Clone(objectMediaTypes), "application/json;stream=watch", protobufMediaType+";stream=watch")
	patchMediaTypes  = []string{"application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json"}
	anyMediaType     = []string{"*/*"}
)

// optionParams names query parameters and the option type whose fields they are.
type optionParams struct {
	model any
	names []string
}

// The query parameters each verb serves (see request.go, handler.go and delete.go).
var (
	listQuery = optionParams{metav1.ListOptions{}, []string{"allowWatchBookmarks", "continue", "fieldSelector", "labelSelector",
		"limit", "resourceVersion", "resourceVersionMatch", "sendInitialEvents", "timeoutSeconds", "watch"}}
	// deleteCollectionListQuery is listQuery without what only a watch takes.
	deleteCollectionListQuery = optionParams{metav1.ListOptions{}, []string{"continue", "fieldSelector", "labelSelector",
		"limit", "resourceVersion", "resourceVersionMatch", "sendInitialEvents", "timeoutSeconds"}}
	createQuery = optionParams{metav1.CreateOptions{}, []string{"dryRun", "fieldManager", "fieldValidation"}}
	updateQuery = optionParams{metav1.UpdateOptions{}, []string{"dryRun", "fieldManager", "fieldValidation"}}
	patchQuery  = optionParams{metav1.PatchOptions{}, []string{"dryRun", "fieldManager", "fieldValidation", "force"}}
	deleteQuery = optionParams{metav1.DeleteOptions{}, []string{"dryRun", "gracePeriodSeconds", "orphanDependents", "propagationPolicy"}}
)

// subresourceGetOptions are the option types a subresource's getParams are looked up in.
var subresourceGetOptions = []any{corev1.PodLogOptions{}, metav1.GetOptions{}}

// apiRoute is one operation on one path.
type apiRoute struct {
	method, path, operationID, doc string
	tags                           []string
	params                         []common.Parameter
	consumes, produces             []string
	metadata                       map[string]any
	body                           any // request payload sample; nil without a body
	responses                      []common.StatusCodeResponse
}

var _ common.Route = (*apiRoute)(nil)

func (r *apiRoute) Method() string                                   { return r.method }
func (r *apiRoute) Path() string                                     { return r.path }
func (r *apiRoute) OperationName() string                            { return r.operationID }
func (r *apiRoute) Parameters() []common.Parameter                   { return r.params }
func (r *apiRoute) Description() string                              { return r.doc }
func (r *apiRoute) Consumes() []string                               { return r.consumes }
func (r *apiRoute) Produces() []string                               { return r.produces }
func (r *apiRoute) Metadata() map[string]any                         { return r.metadata }
func (r *apiRoute) RequestPayloadSample() any                        { return r.body }
func (r *apiRoute) ResponsePayloadSample() any                       { return nil }
func (r *apiRoute) StatusCodeResponses() []common.StatusCodeResponse { return r.responses }

// routeIDAndTags gives kube-openapi's builders the operation ID and tags computed with the
// route (common.Config.GetOperationIDAndTagsFromRoute).
func routeIDAndTags(r common.Route) (string, []string, error) {
	ar, ok := r.(*apiRoute)
	if !ok {
		return "", nil, fmt.Errorf("apiserver: unexpected OpenAPI route %T", r)
	}
	return ar.operationID, ar.tags, nil
}

type apiParam struct {
	name, doc, dataType string
	required            bool
	kind                common.ParameterKind
}

var _ common.Parameter = (*apiParam)(nil)

func (p *apiParam) Name() string               { return p.name }
func (p *apiParam) Description() string        { return p.doc }
func (p *apiParam) Required() bool             { return p.required }
func (p *apiParam) Kind() common.ParameterKind { return p.kind }
func (p *apiParam) DataType() string           { return p.dataType }

// AllowMultiple is false for every parameter, as kube-apiserver declares them (dryRun
// included), which the documents show as uniqueItems.
func (p *apiParam) AllowMultiple() bool { return false }

type apiResponse struct {
	code    int
	message string
	model   any
}

func (r apiResponse) Code() int       { return r.code }
func (r apiResponse) Message() string { return r.message }
func (r apiResponse) Model() any      { return r.model }

func answerOK(model any) common.StatusCodeResponse       { return apiResponse{200, "OK", model} }
func answerCreated(model any) common.StatusCodeResponse  { return apiResponse{201, "Created", model} }
func answerAccepted(model any) common.StatusCodeResponse { return apiResponse{202, "Accepted", model} }

// apiRoutes are the routes of one group version: one OpenAPI v3 document, a part of v2's.
type apiRoutes struct {
	gv     schema.GroupVersion
	routes []common.Route
}

var _ common.RouteContainer = (*apiRoutes)(nil)

func (c *apiRoutes) RootPath() string                   { return groupVersionPath(c.gv.Group, c.gv.Version) }
func (c *apiRoutes) PathParameters() []common.Parameter { return nil }
func (c *apiRoutes) Routes() []common.Route             { return c.routes }

// openAPIModel is one Go type the documents describe and the group/version/kinds it is
// served as; the definition namer marks its schema with them.
type openAPIModel struct {
	gvk schema.GroupVersionKind
	obj runtime.Object
}

// routeBuilder builds the routes of one registry snapshot.
type routeBuilder struct {
	resources []*resource
	// definitions are the generated definitions, read for the query parameters' types and
	// descriptions.
	definitions map[string]common.OpenAPIDefinition
	served      map[schema.GroupVersion]bool
	models      []openAPIModel
	// containers in the order of their first resource.
	containers []*apiRoutes
}

func newRouteBuilder(resources []*resource, definitions map[string]common.OpenAPIDefinition) *routeBuilder {
	b := &routeBuilder{resources: resources, definitions: definitions, served: map[schema.GroupVersion]bool{}}
	for _, r := range resources {
		b.served[r.gvk().GroupVersion()] = true
	}
	for _, api := range reviewAPIs {
		b.served[api.gvk().GroupVersion()] = true
	}
	return b
}

// build returns a container per served group version, review APIs included.
func (b *routeBuilder) build() ([]*apiRoutes, error) {
	for _, r := range b.resources {
		routes, err := b.resourceRoutes(r)
		if err != nil {
			return nil, fmt.Errorf("apiserver: OpenAPI for %s: %w", r.gvr(), err)
		}
		c := b.container(r.gvk().GroupVersion())
		c.routes = append(c.routes, routes...)
	}
	for _, api := range reviewAPIs {
		route, err := b.reviewRoute(api)
		if err != nil {
			return nil, fmt.Errorf("apiserver: OpenAPI for %s: %w", api.resource, err)
		}
		c := b.container(api.gvk().GroupVersion())
		c.routes = append(c.routes, route)
	}
	return b.containers, nil
}

func (b *routeBuilder) container(gv schema.GroupVersion) *apiRoutes {
	for _, c := range b.containers {
		if c.gv == gv {
			return c
		}
	}
	c := &apiRoutes{gv: gv}
	b.containers = append(b.containers, c)
	return c
}

// scheme registers every model with the kinds it is served as, and the option, watch-event
// and status types of every served group version (metav1.AddToGroupVersion), as
// kube-apiserver's scheme has them: the definition namer reads the GVK extensions from it.
func (b *routeBuilder) scheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	gvs := make([]schema.GroupVersion, 0, len(b.served))
	for gv := range b.served {
		gvs = append(gvs, gv)
	}
	slices.SortFunc(gvs, func(a, b schema.GroupVersion) int { return strings.Compare(a.String(), b.String()) })
	for _, gv := range gvs {
		metav1.AddToGroupVersion(scheme, gv)
	}
	for _, m := range b.models {
		scheme.AddKnownTypeWithName(m.gvk, m.obj)
	}
	return scheme
}

// definitionNamer names definitions by their model names and gives each served kind's the
// x-kubernetes-group-version-kind extension, with kube-apiserver's namer.
func (b *routeBuilder) definitionNamer() *endpointsopenapi.DefinitionNamer {
	return endpointsopenapi.NewDefinitionNamer(b.scheme())
}

func (b *routeBuilder) model(gvk schema.GroupVersionKind, obj runtime.Object) runtime.Object {
	b.models = append(b.models, openAPIModel{gvk: gvk, obj: obj})
	return obj
}

// operation returns kube-apiserver's operation ID for verb and the rest of its name in a
// group version (listAppsV1NamespacedDaemonSet) and the operation's tag (apps_v1).
func operation(gv schema.GroupVersion, verb, rest string) (string, []string) {
	group := strings.TrimSuffix(gv.Group, ".k8s.io")
	if group == "" {
		group = "core"
	}
	id := verb + endpointsopenapi.ToValidOperationID(group, true) + endpointsopenapi.ToValidOperationID(gv.Version, true) + rest
	tag := endpointsopenapi.ToValidOperationID(group, false) + "_" + endpointsopenapi.ToValidOperationID(gv.Version, false)
	return id, []string{tag}
}

func gvkExtension(action string, gvk schema.GroupVersionKind) map[string]any {
	return map[string]any{
		"x-kubernetes-action":             action,
		"x-kubernetes-group-version-kind": metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
	}
}

// queryParams describes the named query parameters from the fields of their option type.
func (b *routeBuilder) queryParams(sets ...optionParams) ([]common.Parameter, error) {
	var out []common.Parameter
	for _, set := range sets {
		name := util.GetCanonicalTypeName(set.model)
		def, ok := b.definitions[name]
		if !ok {
			return nil, fmt.Errorf("no definition of %s", name)
		}
		for _, n := range set.names {
			p, err := fieldParam(def, n)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// fieldParam is the query parameter that sets the field n of an option type. A list
// field is a repeatable string parameter, as kube-apiserver declares it.
func fieldParam(def common.OpenAPIDefinition, n string) (*apiParam, error) {
	prop, ok := def.Schema.Properties[n]
	if !ok {
		return nil, fmt.Errorf("no field %q", n)
	}
	dataType := "string"
	if len(prop.Type) == 1 && prop.Type[0] != "array" && prop.Type[0] != "object" {
		dataType = prop.Type[0]
	}
	return &apiParam{name: n, doc: prop.Description, dataType: dataType, kind: common.QueryParameterKind}, nil
}

// subresourceGetParams describes a subresource's getParams from the first option type
// that has each.
func (b *routeBuilder) subresourceGetParams(names []string) ([]common.Parameter, error) {
	var out []common.Parameter
	for _, n := range names {
		var found *apiParam
		for _, model := range subresourceGetOptions {
			if def, ok := b.definitions[util.GetCanonicalTypeName(model)]; ok {
				if p, err := fieldParam(def, n); err == nil {
					found = p
					break
				}
			}
		}
		if found == nil {
			return nil, fmt.Errorf("query parameter %q is no field of a known option type", n)
		}
		out = append(out, found)
	}
	return out, nil
}

func pathParam(name, doc string) common.Parameter {
	return &apiParam{name: name, doc: doc, dataType: "string", required: true, kind: common.PathParameterKind}
}

func bodyParam(required bool) common.Parameter {
	return &apiParam{name: "body", dataType: "object", required: required, kind: common.BodyParameterKind}
}

var namespaceParam = pathParam("namespace", "object name and auth scope, such as for teams and projects")

func join(lists ...[]common.Parameter) []common.Parameter {
	var out []common.Parameter
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// resourceRoutes are the routes of one resource, its subresources' included, with the
// paths, names and documentation kube-apiserver's installer gives them.
func (b *routeBuilder) resourceRoutes(res *resource) ([]common.Route, error) {
	gv := res.gvk().GroupVersion()
	gvk := res.gvk()
	obj := b.model(gvk, res.newFunc())
	list := b.model(gv.WithKind(res.listKind()), res.newListFunc())
	kind := res.kind

	listQ, err := b.queryParams(listQuery)
	if err != nil {
		return nil, err
	}
	createQ, err := b.queryParams(createQuery)
	if err != nil {
		return nil, err
	}
	updateQ, err := b.queryParams(updateQuery)
	if err != nil {
		return nil, err
	}
	patchQ, err := b.queryParams(patchQuery)
	if err != nil {
		return nil, err
	}
	deleteQ, err := b.queryParams(deleteQuery)
	if err != nil {
		return nil, err
	}
	deleteCollectionQ, err := b.queryParams(deleteQuery, deleteCollectionListQuery)
	if err != nil {
		return nil, err
	}

	base := groupVersionPath(res.group, res.version)
	scope, ns, nsParams := "", "", []common.Parameter(nil)
	if res.namespaced {
		scope, ns, nsParams = "/namespaces/{namespace}", "Namespaced", []common.Parameter{namespaceParam}
	}
	collection := base + scope + "/" + res.name
	item := collection + "/{name}"
	watchCollection := base + "/watch" + scope + "/" + res.name
	itemParams := append(slices.Clone(nsParams), pathParam("name", "name of the "+kind))

	route := func(method, path, verb, rest, action, doc string, params []common.Parameter, body any,
		consumes, produces []string, responses ...common.StatusCodeResponse) *apiRoute {
		id, tags := operation(gv, verb, rest)
		return &apiRoute{method: method, path: path, operationID: id, tags: tags, doc: doc, params: params, body: body,
			consumes: consumes, produces: produces, metadata: gvkExtension(action, gvk), responses: responses}
	}
	deleted := any(&metav1.Status{})
	if res.returnDeletedObject {
		deleted = obj
	}
	putResponses := []common.StatusCodeResponse{answerOK(obj)}
	if res.allowCreateOnUpdate {
		putResponses = append(putResponses, answerCreated(obj))
	}
	watchEvent := &metav1.WatchEvent{}

	routes := []common.Route{
		route("GET", collection, "list", ns+kind, "list", "list or watch objects of kind "+kind,
			join(nsParams, listQ), nil, nil, watchMediaTypes, answerOK(list)),
		route("POST", collection, "create", ns+kind, "post", "create a "+kind,
			join(nsParams, createQ, []common.Parameter{bodyParam(true)}), obj, anyMediaType, objectMediaTypes, answerCreated(obj)),
		route("GET", item, "read", ns+kind, "get", "read the specified "+kind,
			itemParams, nil, nil, objectMediaTypes, answerOK(obj)),
		route("PUT", item, "replace", ns+kind, "put", "replace the specified "+kind,
			join(itemParams, updateQ, []common.Parameter{bodyParam(true)}), obj, anyMediaType, objectMediaTypes, putResponses...),
		route("PATCH", item, "patch", ns+kind, "patch", "partially update the specified "+kind,
			join(itemParams, patchQ, []common.Parameter{bodyParam(true)}), &metav1.Patch{}, patchMediaTypes, objectMediaTypes, answerOK(obj)),
		route("DELETE", item, "delete", ns+kind, "delete", "delete a "+kind,
			join(itemParams, deleteQ, []common.Parameter{bodyParam(false)}), &metav1.DeleteOptions{}, anyMediaType, objectMediaTypes,
			answerOK(deleted), answerAccepted(deleted)),
		route("GET", watchCollection, "watch", ns+kind+"List", "watchlist",
			"watch individual changes to a list of "+kind+". deprecated: use the 'watch' parameter with a list operation instead.",
			join(nsParams, listQ), nil, nil, watchMediaTypes, answerOK(watchEvent)),
		route("GET", watchCollection+"/{name}", "watch", ns+kind, "watch",
			"watch changes to an object of kind "+kind+". deprecated: use the 'watch' parameter with a list operation instead, filtered to a single item with the 'fieldSelector' parameter.",
			join(itemParams, listQ), nil, nil, watchMediaTypes, answerOK(watchEvent)),
	}
	if !res.noDeleteCollection {
		routes = append(routes, route("DELETE", collection, "delete", "Collection"+ns+kind, "deletecollection", "delete collection of "+kind,
			join(nsParams, deleteCollectionQ, []common.Parameter{bodyParam(false)}), &metav1.DeleteOptions{}, anyMediaType, objectMediaTypes, answerOK(list)))
	}
	if res.namespaced {
		routes = append(routes,
			route("GET", base+"/"+res.name, "list", kind+"ForAllNamespaces", "list", "list or watch objects of kind "+kind,
				listQ, nil, nil, watchMediaTypes, answerOK(list)),
			route("GET", base+"/watch/"+res.name, "watch", kind+"ListForAllNamespaces", "watchlist",
				"watch individual changes to a list of "+kind+". deprecated: use the 'watch' parameter with a list operation instead.",
				listQ, nil, nil, watchMediaTypes, answerOK(watchEvent)))
	}
	for i := range res.subresources {
		subRoutes, err := b.subresourceRoutes(res, &res.subresources[i], item, itemParams, ns)
		if err != nil {
			return nil, err
		}
		routes = append(routes, subRoutes...)
	}
	return routes, nil
}

// subresourceRoutes are the routes of one subresource: one per verb it serves, on the
// kind it takes or returns.
func (b *routeBuilder) subresourceRoutes(res *resource, sub *subresource, item string, itemParams []common.Parameter, ns string) ([]common.Route, error) {
	gv := res.gvk().GroupVersion()
	obj, gvk, err := b.subresourceObject(res, sub)
	if err != nil {
		return nil, err
	}
	path := item + "/" + sub.name
	rest := ns + res.kind + endpointsopenapi.ToValidOperationID(sub.name, true)
	route := func(method, verb, action, doc string, params []common.Parameter, body any, consumes, produces []string,
		responses ...common.StatusCodeResponse) *apiRoute {
		id, tags := operation(gv, verb, rest)
		return &apiRoute{method: method, path: path, operationID: id, tags: tags, doc: doc, params: params, body: body,
			consumes: consumes, produces: produces, metadata: gvkExtension(action, gvk), responses: responses}
	}
	var routes []common.Route
	for _, verb := range sub.verbs {
		switch verb {
		case "get":
			query, err := b.subresourceGetParams(sub.getParams)
			if err != nil {
				return nil, fmt.Errorf("subresource %s: %w", sub.name, err)
			}
			var answer any = obj
			produces := objectMediaTypes
			if len(sub.produces) > 0 {
				answer, produces = "", sub.produces // text, which the documents show as a string
			}
			routes = append(routes, route("GET", "read", "get", "read "+sub.name+" of the specified "+res.kind,
				join(itemParams, query), nil, nil, produces, answerOK(answer)))
		case "create":
			query, err := b.queryParams(createQuery)
			if err != nil {
				return nil, err
			}
			routes = append(routes, route("POST", "create", "post", "create "+sub.name+" of a "+res.kind,
				join(itemParams, query, []common.Parameter{bodyParam(true)}), obj, anyMediaType, objectMediaTypes, answerCreated(obj)))
		case "update":
			query, err := b.queryParams(updateQuery)
			if err != nil {
				return nil, err
			}
			routes = append(routes, route("PUT", "replace", "put", "replace "+sub.name+" of the specified "+res.kind,
				join(itemParams, query, []common.Parameter{bodyParam(true)}), obj, anyMediaType, objectMediaTypes, answerOK(obj)))
		case "patch":
			query, err := b.queryParams(patchQuery)
			if err != nil {
				return nil, err
			}
			routes = append(routes, route("PATCH", "patch", "patch", "partially update "+sub.name+" of the specified "+res.kind,
				join(itemParams, query, []common.Parameter{bodyParam(true)}), &metav1.Patch{}, patchMediaTypes, objectMediaTypes, answerOK(obj)))
		default:
			return nil, fmt.Errorf("subresource %s: verb %q has no OpenAPI operation", sub.name, verb)
		}
	}
	return routes, nil
}

// subresourceObject is the Go type and kind a subresource takes or returns: the resource's
// own, or the one named by sub.kind, found in client-go's scheme in the resource's group
// version, else in a served group version, else in the v1 of some group (pods/eviction
// takes policy/v1 Eviction).
func (b *routeBuilder) subresourceObject(res *resource, sub *subresource) (runtime.Object, schema.GroupVersionKind, error) {
	if sub.kind == "" {
		return res.newFunc(), res.gvk(), nil
	}
	var candidates []schema.GroupVersionKind
	for gvk := range Scheme.AllKnownTypes() {
		if gvk.Kind == sub.kind && gvk.Version != runtime.APIVersionInternal {
			candidates = append(candidates, gvk)
		}
	}
	rank := func(gvk schema.GroupVersionKind) int {
		switch {
		case gvk.GroupVersion() == res.gvk().GroupVersion():
			return 0
		case b.served[gvk.GroupVersion()]:
			return 1
		case gvk.Version == "v1":
			return 2
		}
		return 3
	}
	slices.SortFunc(candidates, func(x, y schema.GroupVersionKind) int {
		if d := rank(x) - rank(y); d != 0 {
			return d
		}
		return strings.Compare(x.String(), y.String())
	})
	if len(candidates) == 0 || rank(candidates[0]) == 3 {
		return nil, schema.GroupVersionKind{}, fmt.Errorf("subresource %s: no Go type for kind %q", sub.name, sub.kind)
	}
	obj, err := Scheme.New(candidates[0])
	if err != nil {
		return nil, schema.GroupVersionKind{}, err
	}
	return b.model(candidates[0], obj), candidates[0], nil
}

// reviewRoute is the create operation of a review API.
func (b *routeBuilder) reviewRoute(api reviewAPI) (common.Route, error) {
	query, err := b.queryParams(createQuery)
	if err != nil {
		return nil, err
	}
	gvk := api.gvk()
	obj := b.model(gvk, api.newFunc())
	rest, params := api.kind, []common.Parameter{bodyParam(true)}
	if api.namespaced {
		rest, params = "Namespaced"+api.kind, append(params, namespaceParam)
	}
	id, tags := operation(gvk.GroupVersion(), "create", rest)
	return &apiRoute{method: "POST", path: api.path(),
		operationID: id, tags: tags, doc: "create a " + api.kind,
		params: join(query, params), body: obj,
		consumes: anyMediaType, produces: objectMediaTypes, metadata: gvkExtension("post", gvk),
		responses: []common.StatusCodeResponse{answerCreated(obj)}}, nil
}
