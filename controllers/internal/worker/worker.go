// Package worker runs the loop of a controller's workers: take an item off a rate-limited
// work queue, sync it, and try it again with back-off when the sync fails.
package worker

import (
	"context"

	"k8s.io/client-go/util/workqueue"
)

// Run syncs the items of q one after the other until q is shut down. An item that syncs
// is forgotten by q's rate limiter. One that fails is added again after the limiter's
// back-off, unless ctx is done, and failed is told, with how many times the item has been
// requeued so far: a log line with that count tells a transient failure from a stuck item.
func Run[T comparable](ctx context.Context, q workqueue.TypedRateLimitingInterface[T],
	sync func(context.Context, T) error, failed func(item T, requeues int, err error)) {
	for ProcessNext(ctx, q, sync, failed) {
	}
}

// ProcessNext syncs one item of q as Run does, waiting for one if q is empty, and reports
// false once q is shut down.
func ProcessNext[T comparable](ctx context.Context, q workqueue.TypedRateLimitingInterface[T],
	sync func(context.Context, T) error, failed func(item T, requeues int, err error)) bool {
	item, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(item)
	if err := sync(ctx, item); err != nil {
		if ctx.Err() == nil {
			q.AddRateLimited(item)
			failed(item, q.NumRequeues(item), err)
		}
		return true
	}
	q.Forget(item)
	return true
}
