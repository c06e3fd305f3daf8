package agent

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/general-agent/general-agent/clients/go/gen/general_agent/v1"
)

// Domain is the google.rpc.ErrorInfo domain of the service's errors.
const Domain = "general-agent"

// FieldViolation is one google.rpc.BadRequest field violation: which request
// field (a path such as "session.approval_policy.entries[0]") and why.
type FieldViolation struct {
	Field       string
	Description string
	Reason      string
}

// Error is a gRPC error of the service, decoded: its code and message, the
// google.rpc.ErrorInfo (reason, domain, metadata), the BadRequest field
// violations and the RetryInfo delay. It keeps the status, so
// status.FromError and status.Code still work on it.
type Error struct {
	Code    codes.Code
	Message string
	// Reason is the ErrorInfo reason, e.g. "SESSION_BUSY" (the ErrorReason
	// value name without its ERROR_REASON_ prefix); "" without ErrorInfo.
	Reason string
	// Domain is the ErrorInfo domain ("general-agent").
	Domain string
	// Metadata is the ErrorInfo metadata (e.g. "active_run_id", "resolved_by");
	// never nil.
	Metadata        map[string]string
	FieldViolations []FieldViolation
	// RetryDelay is the RetryInfo delay (UNAVAILABLE, RESOURCE_EXHAUSTED); 0
	// when none was sent.
	RetryDelay time.Duration

	status *status.Status
}

// Error reads "<code>: <message> (reason <REASON>)".
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", e.Code, e.Message)
	if e.Reason != "" {
		fmt.Fprintf(&b, " (reason %s)", e.Reason)
	}
	return b.String()
}

// GRPCStatus makes status.FromError and status.Code work on an *Error.
func (e *Error) GRPCStatus() *status.Status { return e.status }

// Is reports whether the error has the given reason, so that
// errors.Is(err, agent.ReasonError(agentv1.ErrorReason_ERROR_REASON_SESSION_BUSY))
// works; HasReason is the shorter spelling.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) || t.status != nil {
		return false
	}
	return t.Reason != "" && t.Reason == e.Reason
}

// ReasonError is a sentinel for errors.Is: it matches any *Error whose reason is r.
func ReasonError(r agentv1.ErrorReason) error {
	return &Error{Reason: ReasonName(r)}
}

// ReasonName is the wire reason of an ErrorReason: "SESSION_BUSY" for
// ERROR_REASON_SESSION_BUSY.
func ReasonName(r agentv1.ErrorReason) string {
	return strings.TrimPrefix(r.String(), "ERROR_REASON_")
}

// FromError decodes a gRPC error returned by a generated call. It returns nil
// for nil, the same *Error for an *Error, and for an error that carries no
// gRPC status an *Error with code Unknown and the error's text.
func FromError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) && e.status != nil {
		return e
	}
	// The status of the innermost gRPC error, so a wrapped error (fmt.Errorf
	// with %w) keeps its own code and message.
	var grpcErr interface{ GRPCStatus() *status.Status }
	if errors.As(err, &grpcErr) {
		if st := grpcErr.GRPCStatus(); st != nil {
			return fromStatus(st)
		}
	}
	return fromStatus(status.Convert(err))
}

// FromStatus decodes a google.rpc.Status message: a RunSession
// command_result's status or run_finished.error. It returns nil for nil or
// an OK status.
func FromStatus(st *spb.Status) *Error {
	if st == nil || st.GetCode() == int32(codes.OK) {
		return nil
	}
	return fromStatus(status.FromProto(st))
}

func fromStatus(st *status.Status) *Error {
	e := &Error{Code: st.Code(), Message: st.Message(), Metadata: map[string]string{}, status: st}
	for _, detail := range st.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			if e.Reason == "" {
				e.Reason, e.Domain = d.GetReason(), d.GetDomain()
				for k, v := range d.GetMetadata() {
					e.Metadata[k] = v
				}
			}
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				e.FieldViolations = append(e.FieldViolations, FieldViolation{
					Field: v.GetField(), Description: v.GetDescription(), Reason: v.GetReason(),
				})
			}
		case *errdetails.RetryInfo:
			e.RetryDelay = d.GetRetryDelay().AsDuration()
		}
	}
	return e
}

// Reason is the ErrorInfo reason of err ("" when err is nil or has none).
func Reason(err error) string {
	if e := FromError(err); e != nil {
		return e.Reason
	}
	return ""
}

// HasReason reports whether err carries the ErrorInfo reason r.
func HasReason(err error, r agentv1.ErrorReason) bool {
	return err != nil && Reason(err) == ReasonName(r)
}

// Fields are the fields named by err's BadRequest violations, in order.
func Fields(err error) []string {
	e := FromError(err)
	if e == nil {
		return nil
	}
	fields := make([]string, 0, len(e.FieldViolations))
	for _, v := range e.FieldViolations {
		fields = append(fields, v.Field)
	}
	return fields
}
