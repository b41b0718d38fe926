package apiserver

import (
	"context"
	"errors"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/miniplane/miniplane/store"
)

// generateNameAttempts bounds retries when a generated name collides with an existing one.
const generateNameAttempts = 5

// maxGeneratedNameLength leaves room for the 5 random characters within 63.
const maxGeneratedNameLength = 63 - 5

// create serves POST to a collection.
func (c *call) create() {
	obj, err := c.readObject()
	if err != nil {
		c.fail(err)
		return
	}
	m, _ := meta.Accessor(obj)
	if err := c.checkBodyNamespace(m); err != nil {
		c.fail(err)
		return
	}
	c.info.name = m.GetName()
	dryRun, err := c.dryRun()
	if err != nil {
		c.fail(err)
		return
	}
	manager, err := c.fieldManager("CreateOptions")
	if err != nil {
		c.fail(err)
		return
	}
	created, err := c.createObject(obj, createOptions{dryRun: dryRun, manager: manager})
	if err != nil {
		c.fail(err)
		return
	}
	c.respond(http.StatusCreated, created, nil)
}

// readObject reads and decodes the request body as an object of the resource's kind.
func (c *call) readObject() (runtime.Object, error) {
	data, err := c.readBody()
	if err != nil {
		return nil, err
	}
	obj := c.info.res.newFunc()
	if err := c.decodeObject(data, c.info.res.gvk(), obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// checkBodyNamespace makes the body's namespace agree with the URL's.
func (c *call) checkBodyNamespace(m metav1.Object) error {
	if !c.info.res.namespaced {
		m.SetNamespace("")
		return nil
	}
	switch m.GetNamespace() {
	case "":
		m.SetNamespace(c.info.namespace)
	case c.info.namespace:
	default:
		return badRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	return nil
}

// createOptions say how an object is created.
type createOptions struct {
	dryRun bool
	// manager is recorded in managedFields as the object's writer; "" records nothing.
	manager string
	// applied: obj is the result of a server-side apply and has its managedFields.
	applied bool
}

// createObject runs the create rules on obj and stores it (unless opts.dryRun).
func (c *call) createObject(obj runtime.Object, opts createOptions) (runtime.Object, error) {
	m, _ := meta.Accessor(obj)
	if m.GetResourceVersion() != "" {
		return nil, badRequest("resourceVersion should not be set on objects to be created")
	}
	if err := c.authorizeNodeObject(obj); err != nil {
		return nil, err
	}
	created, err := c.s.createStored(c.r.Context(), c.info.res, obj, opts)
	c.info.name = m.GetName()
	return created, err
}

// createStored creates obj as every create does, from a request or from the server
// itself: namespace lifecycle, server-owned metadata and the kind's defaults, admission,
// validation, the values the kind takes from a pool, then the write.
func (s *Server) createStored(ctx context.Context, res *resource, obj runtime.Object, opts createOptions) (runtime.Object, error) {
	dryRun := opts.dryRun
	m, _ := meta.Accessor(obj)
	if res.terminating.Load() {
		return nil, statusError(http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed,
			"create not allowed while custom resource definition is terminating")
	}
	if res.namespaced {
		if err := s.checkNamespaceOpen(ctx, m.GetNamespace(), res, m.GetName()); err != nil {
			return nil, err
		}
	}
	now := metav1.NewTime(s.clock.Now().Truncate(time.Second))
	s.prepareForCreate(res, obj, now)
	switch {
	case opts.applied:
	case opts.manager != "":
		// After the defaults, which the creator owns as kube-apiserver's decoding makes it,
		// and before admission, whose changes nobody owns.
		obj = s.trackWrite(res, "", res.newFunc(), obj, opts.manager)
		m, _ = meta.Accessor(obj)
	default:
		m.SetManagedFields(nil)
	}
	generated := m.GetName() == "" && m.GetGenerateName() != ""
	for attempt := 0; ; attempt++ {
		if generated {
			base := m.GetGenerateName()
			if len(base) > maxGeneratedNameLength {
				base = base[:maxGeneratedNameLength]
			}
			m.SetName(base + rand.String(5))
		}
		a := &admission{op: opCreate, res: res, obj: obj, namespace: m.GetNamespace(), name: m.GetName(), dryRun: dryRun}
		if err := s.admit(ctx, a, mutating); err != nil {
			return nil, err
		}
		if errs := s.validateCreate(res, obj); len(errs) > 0 {
			return nil, apierrors.NewInvalid(res.gvk().GroupKind(), m.GetName(), errs)
		}
		if err := s.admit(ctx, a, validating); err != nil {
			return nil, err
		}
		undo := func() {}
		if pu, ok := res.strategy.(poolUser); ok {
			var err error
			if undo, err = pu.allocate(ctx, obj, nil, dryRun); err != nil {
				return nil, err
			}
		}
		if dryRun {
			return obj, nil
		}
		created, err := s.storeFor(res).Create(ctx, res.key(s.cfg.EtcdPrefix, m.GetNamespace(), m.GetName()), obj, res.ttl)
		if err != nil {
			undo()
		}
		if errors.Is(err, store.ErrAlreadyExists) && generated && attempt < generateNameAttempts {
			continue
		}
		if errors.Is(err, store.ErrAlreadyExists) {
			return nil, apierrors.NewAlreadyExists(res.groupResource(), m.GetName())
		}
		if err == nil {
			s.afterCreate(ctx, res, created)
		}
		return created, err
	}
}

// prepareForCreate sets the metadata the server owns and applies the resource's rules.
func (s *Server) prepareForCreate(res *resource, obj runtime.Object, now metav1.Time) {
	m, _ := meta.Accessor(obj)
	m.SetUID(uuid.NewUUID())
	m.SetCreationTimestamp(now)
	m.SetDeletionTimestamp(nil)
	m.SetDeletionGracePeriodSeconds(nil)
	m.SetSelfLink("")
	if res.tracksGeneration {
		m.SetGeneration(1)
	} else {
		m.SetGeneration(0)
	}
	res.strategy.prepareForCreate(obj, now.Time)
}

// validateCreate runs object-metadata and resource validation.
func (s *Server) validateCreate(res *resource, obj runtime.Object) field.ErrorList {
	m, _ := meta.Accessor(obj)
	errs := apivalidation.ValidateObjectMetaAccessor(m, res.namespaced, res.nameValidator(), field.NewPath("metadata"))
	return append(errs, res.strategy.validate(obj)...)
}
