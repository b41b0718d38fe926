package apiserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/miniplane/miniplane/store"
)

// toAPIError turns any error into the Kubernetes Status a client should see. It is the one
// place where store sentinels become HTTP codes.
func toAPIError(err error, gr schema.GroupResource, name string) *apierrors.StatusError {
	var se *apierrors.StatusError
	if errors.As(err, &se) {
		return se
	}
	var storeErr *store.Error
	msg := err.Error()
	if errors.As(err, &storeErr) {
		msg = storeErr.Message
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return apierrors.NewNotFound(gr, name)
	case errors.Is(err, store.ErrAlreadyExists):
		return apierrors.NewAlreadyExists(gr, name)
	case errors.Is(err, store.ErrConflict):
		return apierrors.NewConflict(gr, name, errors.New(msg))
	case errors.Is(err, store.ErrExpired):
		se := apierrors.NewResourceExpired(msg)
		if storeErr != nil {
			se.ErrStatus.ListMeta.Continue = storeErr.Continue
		}
		return se
	case errors.Is(err, store.ErrInvalidObject):
		return apierrors.NewBadRequest(msg)
	}
	return apierrors.NewInternalError(err)
}

// conflictError is the message clients see when their resourceVersion is stale.
func conflictError(gr schema.GroupResource, name string) *apierrors.StatusError {
	return apierrors.NewConflict(gr, name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
}

// writeError writes err as a Status. Internal errors are logged: the client sees only
// the message.
func writeError(w http.ResponseWriter, r *http.Request, err error, gr schema.GroupResource, name string) {
	status := toAPIError(err, gr, name).ErrStatus
	// A client that went away (or a server shutting down) is not a server error worth a log.
	if status.Code >= 500 && !errors.Is(err, context.Canceled) {
		log := stateFrom(r.Context()).log
		if log == nil {
			log = slog.Default()
		}
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "code", status.Code, "err", err)
	}
	writeStatus(w, &status)
}

func writeStatus(w http.ResponseWriter, status *metav1.Status) {
	status.Kind, status.APIVersion = "Status", "v1"
	status.Status = metav1.StatusFailure
	if status.Code == 0 {
		status.Code = http.StatusInternalServerError
	}
	writeJSON(w, int(status.Code), status)
}

func badRequest(format string, args ...any) *apierrors.StatusError {
	return apierrors.NewBadRequest(fmt.Sprintf(format, args...))
}

// unsupportedMediaType is 415 for a body type we cannot read.
func unsupportedMediaType(message string) *apierrors.StatusError {
	return statusError(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType, message)
}

// notAcceptable is 406 for an Accept header we cannot satisfy.
func notAcceptable(message string) *apierrors.StatusError {
	return statusError(http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable, message)
}

// groupResourceNone is used where an error concerns no resource (discovery paths).
var groupResourceNone = schema.GroupResource{}

// statusError builds a StatusError for codes apierrors has no constructor for.
func statusError(code int32, reason metav1.StatusReason, message string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: reason, Message: message,
	}}
}
