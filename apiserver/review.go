package apiserver

import (
	"net/http"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/miniplane/miniplane/apiserver/auth"
)

// reviewAPI is a create-only resource that answers a question about the caller instead of
// storing an object: `kubectl auth whoami` and `kubectl auth can-i` ask them.
type reviewAPI struct {
	group, version, resource, kind string
	newFunc                        func() runtime.Object
	answer                         func(s *Server, u *auth.User, obj runtime.Object) runtime.Object
}

var reviewAPIs = []reviewAPI{
	{
		group: "authentication.k8s.io", version: "v1", resource: "selfsubjectreviews", kind: "SelfSubjectReview",
		newFunc: func() runtime.Object { return &authenticationv1.SelfSubjectReview{} },
		answer: func(_ *Server, u *auth.User, obj runtime.Object) runtime.Object {
			r := obj.(*authenticationv1.SelfSubjectReview)
			r.Status.UserInfo = authenticationv1.UserInfo{Username: u.Name, UID: u.UID, Groups: append([]string(nil), u.Groups...)}
			return r
		},
	},
	{
		group: "authorization.k8s.io", version: "v1", resource: "selfsubjectaccessreviews", kind: "SelfSubjectAccessReview",
		newFunc: func() runtime.Object { return &authorizationv1.SelfSubjectAccessReview{} },
		answer: func(s *Server, u *auth.User, obj runtime.Object) runtime.Object {
			r := obj.(*authorizationv1.SelfSubjectAccessReview)
			var a auth.Attributes
			switch {
			case r.Spec.ResourceAttributes != nil:
				ra := r.Spec.ResourceAttributes
				a = auth.Attributes{Verb: ra.Verb, Group: ra.Group, Resource: ra.Resource, Subresource: ra.Subresource, Namespace: ra.Namespace, Name: ra.Name}
			case r.Spec.NonResourceAttributes != nil:
				a = auth.Attributes{NonResourcePath: r.Spec.NonResourceAttributes.Path}
			default:
				r.Status = authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: "neither resourceAttributes nor nonResourceAttributes given"}
				return r
			}
			switch d, reason := s.authz.Authorize(u, a); d {
			case auth.Allow:
				r.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: true}
			case auth.NodeObjectCheck:
				r.Status = authorizationv1.SubjectAccessReviewStatus{Reason: "allowed only on objects of the node's own"}
			default:
				r.Status = authorizationv1.SubjectAccessReviewStatus{Reason: reason}
			}
			return r
		},
	},
}

func (api reviewAPI) gvk() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: api.group, Version: api.version, Kind: api.kind}
}

// serveReview answers a POST to a review API.
func (s *Server) serveReview(api reviewAPI) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st := stateFrom(r.Context())
		st.verb, st.resource = "create", api.resource
		gr := schema.GroupResource{Group: api.group, Resource: api.resource}
		c := &call{s: s, w: w, r: r, user: st.user}
		var err error
		if c.out, err = negotiate(r); err != nil {
			writeError(w, r, err, gr, "")
			return
		}
		c.out.kind = outputObject // reviews have no table form
		c.info = &requestInfo{verb: "create", res: &resource{group: api.group, version: api.version, name: api.resource, kind: api.kind}}
		data, err := c.readBody()
		if err != nil {
			writeError(w, r, err, gr, "")
			return
		}
		obj := api.newFunc()
		if err := c.decodeObject(data, api.gvk(), obj); err != nil {
			writeError(w, r, err, gr, "")
			return
		}
		out := api.answer(s, st.user, obj)
		out.GetObjectKind().SetGroupVersionKind(api.gvk())
		if m, ok := out.(metav1.ObjectMetaAccessor); ok {
			m.GetObjectMeta().SetCreationTimestamp(metav1.NewTime(s.clock.Now().Truncate(1e9)))
		}
		c.respond(http.StatusCreated, out, nil)
	}
}

// reviewGroups are the API groups of the review APIs, for discovery.
func reviewGroups() []string {
	seen := map[string]bool{}
	var out []string
	for _, api := range reviewAPIs {
		if !seen[api.group] {
			seen[api.group] = true
			out = append(out, api.group)
		}
	}
	return out
}

func reviewResources(group, version string) []metav1.APIResource {
	var out []metav1.APIResource
	for _, api := range reviewAPIs {
		if api.group == group && api.version == version {
			out = append(out, metav1.APIResource{Name: api.resource, Kind: api.kind, Verbs: metav1.Verbs{"create"}})
		}
	}
	return out
}

func reviewGroupVersion(group string) (string, bool) {
	for _, api := range reviewAPIs {
		if api.group == group {
			return api.version, true
		}
	}
	return "", false
}
