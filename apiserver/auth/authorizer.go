package auth

import (
	"fmt"
	"strconv"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
)

// Attributes describe what a request wants to do.
type Attributes struct {
	// Verb is a resource verb (get, list, watch, create, update, patch, delete,
	// deletecollection, and RBAC's own: impersonate, bind, escalate...) or, for a non-resource
	// request, the lower-cased HTTP method.
	Verb        string
	Group       string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
	// NonResourcePath is set for requests outside the resource tree (/metrics, /openapi/v3...).
	NonResourcePath string
}

// IsResourceRequest reports whether a is about a resource rather than a path.
func (a Attributes) IsResourceRequest() bool { return a.NonResourcePath == "" }

// Decision is an authorizer's answer.
type Decision int

// Decisions. NoOpinion passes the question to the next authorizer of a chain; a chain
// that ends without an answer denies. NodeObjectCheck means a node may act only if the
// existing object belongs to it: the caller must call AuthorizeNodeObject with the
// object's node name.
const (
	Deny Decision = iota
	Allow
	NodeObjectCheck
	NoOpinion
)

func (d Decision) String() string {
	switch d {
	case Allow:
		return "allow"
	case NodeObjectCheck:
		return "allow-own-objects"
	case NoOpinion:
		return "no-opinion"
	}
	return "forbid"
}

// An Authorizer decides what a user may do, and says why when it denies or allows.
type Authorizer interface {
	Authorize(u *User, a Attributes) (Decision, string)
}

// A RuleResolver lists what a user may do in a namespace ("" for cluster-wide rules
// only), for SelfSubjectRulesReview and the escalation check. incomplete means that the
// rules leave out what the resolver decides otherwise than by rules.
type RuleResolver interface {
	RulesFor(u *User, namespace string) (rules []rbacv1.PolicyRule, incomplete bool)
}

// Chain asks its authorizers in order: the first that has an opinion decides, as
// kube-apiserver's --authorization-mode=Node,RBAC does. Without any, it denies, with the
// reasons given along the way.
type Chain []Authorizer

// Authorize implements Authorizer.
func (c Chain) Authorize(u *User, a Attributes) (Decision, string) {
	var reasons []string
	for _, z := range c {
		d, reason := z.Authorize(u, a)
		if d != NoOpinion {
			return d, reason
		}
		if reason != "" {
			reasons = append(reasons, reason)
		}
	}
	return Deny, strings.Join(reasons, "; ")
}

// RulesFor implements RuleResolver over every member that is one.
func (c Chain) RulesFor(u *User, namespace string) ([]rbacv1.PolicyRule, bool) {
	var rules []rbacv1.PolicyRule
	incomplete := false
	for _, z := range c {
		r, ok := z.(RuleResolver)
		if !ok {
			incomplete = true
			continue
		}
		more, inc := r.RulesFor(u, namespace)
		rules = append(rules, more...)
		incomplete = incomplete || inc
	}
	return rules, incomplete
}

// PrivilegedGroups may do anything: kube-apiserver lets system:masters through before
// any other authorizer is asked, so that no policy can lock the administrators out.
type PrivilegedGroups []string

// Authorize implements Authorizer.
func (p PrivilegedGroups) Authorize(u *User, _ Attributes) (Decision, string) {
	if u.InGroup(p...) {
		return Allow, ""
	}
	return NoOpinion, ""
}

// RulesFor implements RuleResolver.
func (p PrivilegedGroups) RulesFor(u *User, _ string) ([]rbacv1.PolicyRule, bool) {
	if !u.InGroup(p...) {
		return nil, false
	}
	return []rbacv1.PolicyRule{
		{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
		{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
	}, false
}

var readVerbs = map[string]bool{"get": true, "list": true, "watch": true}

// NodeAuthorizer is kube-apiserver's node authorizer together with what its
// NodeRestriction admission plugin enforces: a node identity (group system:nodes, user
// system:node:<name>, or a fleet's system:node-fleet:<prefix>) may do what NodeRules
// grant, but change only its own Node, its own Lease and the pods bound to it. What the
// rules do not grant it leaves to the next authorizer (RBAC).
type NodeAuthorizer struct{}

// Authorize implements Authorizer.
func (NodeAuthorizer) Authorize(u *User, a Attributes) (Decision, string) {
	if !IsNodeIdentity(u) {
		return NoOpinion, ""
	}
	if a.IsResourceRequest() {
		if d, reason, restricted := restrictNode(u, a); restricted {
			return d, reason
		}
	}
	if RulesAllow(a, nodeRules) {
		return Allow, ""
	}
	return NoOpinion, ""
}

// RulesFor implements RuleResolver: the node rules, incomplete since which objects a node
// may change depends on the object.
func (NodeAuthorizer) RulesFor(u *User, _ string) ([]rbacv1.PolicyRule, bool) {
	if !IsNodeIdentity(u) {
		return nil, false
	}
	return NodeRules(), true
}

// IsNodeIdentity reports whether u is a node's or a fleet's identity.
func IsNodeIdentity(u *User) bool {
	return u.InGroup(NodesGroup) && (strings.HasPrefix(u.Name, NodeUserPrefix) || strings.HasPrefix(u.Name, FleetUserPrefix))
}

// nodeRules are NodeRules, made once: the authorizer reads them on every node request.
var nodeRules = NodeRules()

// NodeRules are what every node identity may do, before the restriction to its own
// objects: a subset of kube-apiserver's system:node role, without what a stub kubelet
// never reads (secrets, configmaps, volumes, certificates), which upstream narrows to the
// node's own pods through a graph of references that miniplane does not keep.
func NodeRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		rule([]string{"create"}, []string{"authentication.k8s.io"}, "tokenreviews"),
		rule([]string{"create"}, []string{"authorization.k8s.io"}, "subjectaccessreviews", "localsubjectaccessreviews"),
		rule([]string{"get", "list", "watch"}, []string{""}, "services"),
		rule([]string{"create", "get", "list", "watch", "update", "patch"}, []string{""}, "nodes"),
		rule([]string{"update", "patch"}, []string{""}, "nodes/status"),
		rule([]string{"create", "update", "patch"}, []string{"", "events.k8s.io"}, "events"),
		rule([]string{"get", "list", "watch", "delete"}, []string{""}, "pods"),
		rule([]string{"update", "patch"}, []string{""}, "pods/status"),
		rule([]string{"get", "create", "update", "patch"}, []string{"coordination.k8s.io"}, "leases"),
		// A kubelet reads RuntimeClasses to find the runtime handler of a pod's class.
		rule([]string{"get", "list", "watch"}, []string{"node.k8s.io"}, "runtimeclasses"),
	}
}

// rule is a resource rule over some API groups.
func rule(verbs, groups []string, resources ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources}
}

// restrictNode decides the requests whose answer depends on which node the object is
// of; restricted is false for the others.
func restrictNode(u *User, a Attributes) (d Decision, reason string, restricted bool) {
	owns := NodeNames(u)
	switch {
	case a.Group == "" && a.Resource == "nodes":
		switch {
		case readVerbs[a.Verb]:
			return 0, "", false
		case (a.Verb == "update" || a.Verb == "patch") && owns(a.Name):
			return Allow, "", true
		case a.Verb == "create" && a.Subresource == "":
			return NodeObjectCheck, "", true // the name is in the body
		}
		return Deny, fmt.Sprintf("node identity %q may only change its own Node", u.Name), true
	case a.Group == "" && a.Resource == "pods":
		if readVerbs[a.Verb] && a.Subresource == "" {
			return 0, "", false
		}
		// As NodeRestriction: a node reports pod status and deletes pods it has stopped,
		// but never changes a pod's spec or metadata.
		if a.Name != "" && (((a.Verb == "update" || a.Verb == "patch") && a.Subresource == "status") ||
			(a.Verb == "delete" && a.Subresource == "")) {
			return NodeObjectCheck, "", true
		}
		return Deny, fmt.Sprintf("node identity %q may only change pods bound to it", u.Name), true
	case a.Group == "coordination.k8s.io" && a.Resource == "leases":
		const ns = "kube-node-lease"
		switch {
		case a.Namespace == ns && a.Subresource == "" && readVerbs[a.Verb]:
			return Allow, "", true
		case a.Namespace == ns && a.Verb == "create":
			return NodeObjectCheck, "", true // the name is in the body
		case a.Namespace == ns && (a.Verb == "update" || a.Verb == "patch") && owns(a.Name):
			return Allow, "", true
		}
		return Deny, fmt.Sprintf("node identity %q may only use its own Lease in kube-node-lease", u.Name), true
	}
	return 0, "", false
}

// NodeNames says which node names a node identity may act as: system:node:<name> its own
// name; a fleet's system:node-fleet:<prefix> every <prefix>-<n> and <prefix>-<instance>-<n>,
// the names of the fleet's nodes when several processes share its credential and each
// names its nodes after an instance of its own (the stub's node-instance). The instances
// share the credential, so each may act on the others' nodes, never beyond the fleet's.
func NodeNames(u *User) func(string) bool {
	switch {
	case strings.HasPrefix(u.Name, NodeUserPrefix):
		name := strings.TrimPrefix(u.Name, NodeUserPrefix)
		return func(n string) bool { return n == name }
	case strings.HasPrefix(u.Name, FleetUserPrefix):
		prefix := strings.TrimPrefix(u.Name, FleetUserPrefix) + "-"
		return func(n string) bool {
			rest, ok := strings.CutPrefix(n, prefix)
			if !ok || rest == "" {
				return false
			}
			if i := strings.LastIndexByte(rest, '-'); i >= 0 {
				if instance := rest[:i]; instance == "" || strings.HasPrefix(instance, "-") || strings.HasSuffix(instance, "-") {
					return false
				}
				rest = rest[i+1:]
			}
			_, err := strconv.ParseUint(rest, 10, 32)
			return err == nil
		}
	}
	return func(string) bool { return false }
}

// AuthorizeNodeObject finishes a NodeObjectCheck: the node may act on an object that
// belongs to nodeName (a pod's spec.nodeName, a Node's or Lease's name) only if it owns
// that name.
func AuthorizeNodeObject(u *User, nodeName string) (Decision, string) {
	if nodeName != "" && NodeNames(u)(nodeName) {
		return Allow, ""
	}
	return Deny, fmt.Sprintf("node identity %q may only change objects of its own node", u.Name)
}
