package apiserver

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// requestInfo is what a resource request is about.
type requestInfo struct {
	verb        string // get list watch create update patch delete deletecollection
	res         *resource
	namespace   string
	name        string
	subresource string
	sub         *subresource // the subresource named, if any
}

// namespaceSubresources are the words that, after /namespaces/<name>/, name a subresource
// of the namespace rather than a resource inside it.
var namespaceSubresources = map[string]bool{"status": true, "finalize": true}

// parseRequest maps a URL under /api/v1 or /apis/<group>/<version> to a requestInfo,
// following kube-apiserver's URL layout (including the legacy /watch/ prefix).
func (s *Server) parseRequest(r *http.Request) (*requestInfo, error) {
	path := strings.Trim(r.URL.Path, "/")
	parts := strings.Split(path, "/")
	var group, version string
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		version, parts = parts[1], parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		group, version, parts = parts[1], parts[2], parts[3:]
	default:
		return nil, notFoundPath(r)
	}
	watchPrefix := false
	if parts[0] == "watch" {
		watchPrefix, parts = true, parts[1:]
	}
	info := &requestInfo{}
	if len(parts) > 0 && parts[0] == "namespaces" && len(parts) > 2 && !namespaceSubresources[parts[2]] {
		info.namespace, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 || len(parts) > 3 {
		return nil, notFoundPath(r)
	}
	info.res = s.reg.lookup(group, version, parts[0])
	if info.res == nil {
		return nil, notFoundPath(r)
	}
	if len(parts) > 1 {
		info.name = parts[1]
	}
	if len(parts) > 2 {
		info.subresource = parts[2]
		if info.sub = info.res.subresource(info.subresource); info.sub == nil {
			return nil, notFoundPath(r)
		}
	}
	if !info.res.namespaced && info.namespace != "" {
		return nil, notFoundPath(r)
	}
	// A namespaced resource may be listed and watched across namespaces, nothing else.
	if info.res.namespaced && info.namespace == "" && (r.Method != http.MethodGet || info.name != "") {
		return nil, notFoundPath(r)
	}
	q := r.URL.Query()
	isWatch := watchPrefix || q.Get("watch") == "true" || q.Get("watch") == "1"
	switch r.Method {
	case http.MethodGet:
		switch {
		case isWatch:
			info.verb = "watch"
		case info.name == "":
			info.verb = "list"
		default:
			info.verb = "get"
		}
	case http.MethodPost:
		info.verb = "create"
		if info.name != "" && info.subresource == "" {
			return nil, methodNotSupported(info, "create")
		}
	case http.MethodPut:
		info.verb = "update"
	case http.MethodPatch:
		info.verb = "patch"
	case http.MethodDelete:
		if info.name == "" {
			info.verb = "deletecollection"
		} else {
			info.verb = "delete"
		}
	default:
		return nil, methodNotSupported(info, strings.ToLower(r.Method))
	}
	if (info.verb == "update" || info.verb == "patch") && info.name == "" {
		return nil, methodNotSupported(info, info.verb)
	}
	if info.sub != nil && !slices.Contains(info.sub.verbs, info.verb) {
		return nil, methodNotSupported(info, info.verb)
	}
	return info, nil
}

func methodNotSupported(info *requestInfo, action string) error {
	gr := info.res.groupResource()
	if info.subresource != "" {
		gr.Resource += "/" + info.subresource
	}
	return statusError(http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed,
		fmt.Sprintf("%s is not supported on resources of kind %q", action, gr.String()))
}

// listParams are the query parameters of list and watch requests.
type listParams struct {
	label                labels.Selector
	field                fields.Selector
	resourceVersion      string
	resourceVersionMatch string
	limit                int64
	continueToken        string
	timeoutSeconds       int64
	allowWatchBookmarks  bool
	sendInitialEvents    *bool
}

func parseListParams(q url.Values, res *resource) (*listParams, error) {
	p := &listParams{
		resourceVersion:      q.Get("resourceVersion"),
		resourceVersionMatch: q.Get("resourceVersionMatch"),
		continueToken:        q.Get("continue"),
	}
	var err error
	if p.label, err = labels.Parse(q.Get("labelSelector")); err != nil {
		return nil, badRequest("unable to parse requirement: %v", err)
	}
	if p.field, err = fields.ParseSelector(q.Get("fieldSelector")); err != nil {
		return nil, badRequest("invalid field selector: %v", err)
	}
	for _, req := range p.field.Requirements() {
		if !res.supportsField(req.Field) {
			return nil, badRequest("field label not supported: %s", req.Field)
		}
	}
	if v := q.Get("limit"); v != "" {
		if p.limit, err = strconv.ParseInt(v, 10, 64); err != nil || p.limit < 0 {
			return nil, badRequest("limit: invalid value %q", v)
		}
	}
	if v := q.Get("timeoutSeconds"); v != "" {
		if p.timeoutSeconds, err = strconv.ParseInt(v, 10, 64); err != nil || p.timeoutSeconds < 0 {
			return nil, badRequest("timeoutSeconds: invalid value %q", v)
		}
	}
	p.allowWatchBookmarks = q.Get("allowWatchBookmarks") == "true"
	if v := q.Get("sendInitialEvents"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, badRequest("sendInitialEvents: invalid value %q", v)
		}
		p.sendInitialEvents = &b
	}
	if p.resourceVersion != "" {
		if _, err := strconv.ParseUint(p.resourceVersion, 10, 64); err != nil {
			return nil, apierrInvalidRV(p.resourceVersion)
		}
	}
	switch p.resourceVersionMatch {
	case "", string(metav1.ResourceVersionMatchExact), string(metav1.ResourceVersionMatchNotOlderThan):
	default:
		return nil, badRequest("resourceVersionMatch: Unsupported value: %q", p.resourceVersionMatch)
	}
	if p.continueToken != "" && p.resourceVersion != "" && p.resourceVersion != "0" {
		return nil, badRequest("specifying resource version is not allowed when using continue")
	}
	return p, nil
}

func apierrInvalidRV(rv string) error {
	return badRequest("invalid resource version %q: must be a non-negative integer", rv)
}

// rvInt parses a resourceVersion known to be numeric.
func rvInt(rv string) int64 {
	n, _ := strconv.ParseInt(rv, 10, 64)
	return n
}
