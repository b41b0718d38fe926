package apiserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/auth/rbac/reconciliation"

	"github.com/miniplane/miniplane/apiserver/auth"
	"github.com/miniplane/miniplane/store"
)

// What the API server does for RBAC besides authorizing: it reconciles the bootstrap
// policy on start, keeps aggregated ClusterRoles current (kube-controller-manager's
// clusterrole-aggregation controller), and refuses to let a user grant permissions it does
// not hold (RBAC's escalation check, which kube-apiserver makes in the RBAC kinds'
// storage and miniplane makes as a validating admission plugin on create and update).

// reconcileBootstrapPolicy creates the bootstrap ClusterRoles and ClusterRoleBindings
// that are missing and adds to the existing ones what they lack, with upstream's
// reconciliation (component-helpers): an object annotated
// rbac.authorization.kubernetes.io/autoupdate: "false" is left as it is, and nothing is
// ever removed. It returns once this server's caches hold the result, so that the first
// request is authorized by it.
func (s *Server) reconcileBootstrapPolicy(ctx context.Context) error {
	roles := reconcileClient{s: s, ctx: ctx, res: s.reg.lookupGroupResource(clusterRolesResource)}
	for _, role := range auth.BootstrapClusterRoles() {
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			_, err := (&reconciliation.ReconcileRoleOptions{
				Role: reconciliation.ClusterRoleRuleOwner{ClusterRole: role.DeepCopy()}, Confirm: true, Client: roles,
			}).Run()
			return err
		})
		if err != nil {
			return fmt.Errorf("bootstrap clusterrole %s: %w", role.Name, err)
		}
	}
	bindings := bindingClient{s: s, ctx: ctx, res: s.reg.lookupGroupResource(clusterRoleBindingsResource)}
	for _, b := range auth.BootstrapClusterRoleBindings(s.cfg.AdminGroups, s.cfg.ReadOnlyGroups) {
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			_, err := (&reconciliation.ReconcileRoleBindingOptions{
				RoleBinding: reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: b.DeepCopy()}, Confirm: true, Client: bindings,
			}).Run()
			return err
		})
		if err != nil {
			return fmt.Errorf("bootstrap clusterrolebinding %s: %w", b.Name, err)
		}
	}
	rev, err := s.store.CurrentRevision(ctx)
	if err != nil {
		return err
	}
	for _, gr := range []schema.GroupResource{clusterRolesResource, clusterRoleBindingsResource} {
		if err := s.reg.lookupGroupResource(gr).cache.waitForRV(ctx, rev, time.Minute); err != nil {
			return fmt.Errorf("bootstrap policy not cached: %w", err)
		}
	}
	return nil
}

// reconcileClient reads and writes one RBAC kind for the reconciliation, on the store
// (not the cache: reconciliation updates what it has just read).
type reconcileClient struct {
	s   *Server
	ctx context.Context
	res *resource
}

var _ reconciliation.RuleOwnerModifier = reconcileClient{}

func (c reconcileClient) get(name string) (runtime.Object, error) {
	obj, err := c.s.store.Get(c.ctx, c.res.key(c.s.cfg.EtcdPrefix, "", name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierrors.NewNotFound(c.res.groupResource(), name)
	}
	return obj, err
}

func (c reconcileClient) create(obj runtime.Object) (runtime.Object, error) {
	return c.s.createStored(c.ctx, c.res, obj.DeepCopyObject(), createOptions{manager: serverFieldManager})
}

// update writes obj over the stored object with the update rules, if the stored one is
// still the version obj was made from.
func (c reconcileClient) update(obj runtime.Object) (runtime.Object, error) {
	m := obj.(metav1.Object)
	return c.s.store.GuaranteedUpdate(c.ctx, c.res.key(c.s.cfg.EtcdPrefix, "", m.GetName()), func(cur runtime.Object) (runtime.Object, error) {
		next := obj.DeepCopyObject()
		if err := c.s.prepareUpdate(c.res, next, cur, nil, m.GetName(), c.s.clock.Now()); err != nil {
			return nil, err
		}
		return next, nil
	}, store.UpdateOptions{})
}

func (c reconcileClient) Get(_, name string) (reconciliation.RuleOwner, error) {
	obj, err := c.get(name)
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: obj.(*rbacv1.ClusterRole)}, nil
}

func (c reconcileClient) Create(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	obj, err := c.create(in.GetObject())
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: obj.(*rbacv1.ClusterRole)}, nil
}

func (c reconcileClient) Update(in reconciliation.RuleOwner) (reconciliation.RuleOwner, error) {
	obj, err := c.update(in.GetObject())
	if err != nil {
		return nil, err
	}
	return reconciliation.ClusterRoleRuleOwner{ClusterRole: obj.(*rbacv1.ClusterRole)}, nil
}

func (c reconcileClient) binding(obj runtime.Object) reconciliation.RoleBinding {
	return reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: obj.(*rbacv1.ClusterRoleBinding)}
}

// bindingClient is reconcileClient for ClusterRoleBindings: the reconciliation's
// interface for bindings has methods of the same names as the one for roles.
type bindingClient reconcileClient

var _ reconciliation.RoleBindingModifier = bindingClient{}

func (c bindingClient) Get(_, name string) (reconciliation.RoleBinding, error) {
	obj, err := reconcileClient(c).get(name)
	if err != nil {
		return nil, err
	}
	return reconcileClient(c).binding(obj), nil
}

func (c bindingClient) Create(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	obj, err := reconcileClient(c).create(in.GetObject())
	if err != nil {
		return nil, err
	}
	return reconcileClient(c).binding(obj), nil
}

func (c bindingClient) Update(in reconciliation.RoleBinding) (reconciliation.RoleBinding, error) {
	obj, err := reconcileClient(c).update(in.GetObject())
	if err != nil {
		return nil, err
	}
	return reconcileClient(c).binding(obj), nil
}

// Delete removes a binding whose roleRef changed, so that it can be made again.
func (c bindingClient) Delete(_, name string, uid types.UID) error {
	_, _, err := c.s.deleteObject(c.ctx, c.res, "", name, &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}, nil)
	return err
}
