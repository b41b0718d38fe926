package garbagecollector

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// get reads one object's metadata live.
func (gc *GarbageCollector) get(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*metav1.PartialObjectMetadata, error) {
	return gc.metadata.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
}

// metadataPatch is a JSON merge patch of the metadata the collector changes. uid and
// resourceVersion are preconditions: the API server refuses the patch with a Conflict when
// the object was replaced or changed since it was read, so that a reference or finalizer
// someone else added in between is never overwritten. A list in a merge patch replaces the
// stored one as a whole, which is why the whole new list is sent.
type metadataPatch struct {
	Metadata patchedMetadata `json:"metadata"`
}

type patchedMetadata struct {
	UID             types.UID                `json:"uid"`
	ResourceVersion string                   `json:"resourceVersion,omitempty"`
	OwnerReferences *[]metav1.OwnerReference `json:"ownerReferences,omitempty"`
	Finalizers      *[]string                `json:"finalizers,omitempty"`
}

// patchMetadata applies mutate to obj's metadata and writes what changed (ownerReferences,
// finalizers) with a merge patch; on a conflict it re-reads the object live and tries again.
// mutate returns false when there is nothing to change.
func (gc *GarbageCollector) patchMetadata(ctx context.Context, item objectRef, obj *metav1.PartialObjectMetadata,
	mutate func(metav1.Object) bool) error {
	client := gc.metadata.Resource(item.resource).Namespace(item.namespace)
	for attempt := 0; ; attempt++ {
		if obj.UID != item.uid {
			return nil
		}
		obj = obj.DeepCopy() // mutate may change the slices in place
		refs, finalizers := slices.Clone(obj.OwnerReferences), slices.Clone(obj.Finalizers)
		if !mutate(obj) {
			return nil
		}
		data, err := mergePatch(obj, refs, finalizers)
		if err != nil {
			return err
		}
		_, err = client.Patch(ctx, item.name, types.MergePatchType, data, metav1.PatchOptions{})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case !apierrors.IsConflict(err) || attempt+1 >= maxUpdateAttempts:
			return fmt.Errorf("patching %s %s: %w", item.resource.GroupResource(), item.key(), err)
		}
		obj, err = client.Get(ctx, item.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("re-reading %s %s: %w", item.resource.GroupResource(), item.key(), err)
		}
	}
}

// mergePatch returns the patch that turns an object with ownerReferences refs and finalizers
// finalizers into obj.
func mergePatch(obj *metav1.PartialObjectMetadata, refs []metav1.OwnerReference, finalizers []string) ([]byte, error) {
	p := metadataPatch{Metadata: patchedMetadata{UID: obj.UID, ResourceVersion: obj.ResourceVersion}}
	if !apiequality.Semantic.DeepEqual(refs, obj.OwnerReferences) {
		next := obj.OwnerReferences
		if next == nil {
			next = []metav1.OwnerReference{}
		}
		p.Metadata.OwnerReferences = &next
	}
	if !slices.Equal(finalizers, obj.Finalizers) {
		next := obj.Finalizers
		if next == nil {
			next = []string{}
		}
		p.Metadata.Finalizers = &next
	}
	return json.Marshal(p)
}
