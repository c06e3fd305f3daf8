package agent

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/general-agent/general-agent/clients/go/gen/general_agent/v1"
)

func richError(t *testing.T) error {
	t.Helper()
	st, err := status.New(codes.FailedPrecondition, "session is busy").WithDetails(
		&errdetails.ErrorInfo{Reason: "SESSION_BUSY", Domain: Domain, Metadata: map[string]string{"active_run_id": "r1"}},
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: "input[0]", Description: "empty", Reason: "EMPTY"},
			{Field: "options.busy_policy", Description: "bad"},
		}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)},
	)
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

func TestFromErrorDecodesEveryDetail(t *testing.T) {
	e := FromError(fmt.Errorf("wrapped: %w", richError(t)))
	if e.Code != codes.FailedPrecondition || e.Message != "session is busy" {
		t.Fatalf("code/message: %v %q", e.Code, e.Message)
	}
	if e.Reason != "SESSION_BUSY" || e.Domain != Domain || e.Metadata["active_run_id"] != "r1" {
		t.Fatalf("error info: %+v", e)
	}
	want := []FieldViolation{{"input[0]", "empty", "EMPTY"}, {"options.busy_policy", "bad", ""}}
	if fmt.Sprint(e.FieldViolations) != fmt.Sprint(want) {
		t.Fatalf("field violations: %v", e.FieldViolations)
	}
	if e.RetryDelay != 1500*time.Millisecond {
		t.Fatalf("retry delay: %v", e.RetryDelay)
	}
	if status.Code(e) != codes.FailedPrecondition {
		t.Fatalf("status.Code on *Error: %v", status.Code(e))
	}
	if e.Error() != "FailedPrecondition: session is busy (reason SESSION_BUSY)" {
		t.Fatalf("text: %q", e.Error())
	}
}

func TestReasonHelpers(t *testing.T) {
	err := richError(t)
	if Reason(err) != "SESSION_BUSY" || !HasReason(err, agentv1.ErrorReason_ERROR_REASON_SESSION_BUSY) {
		t.Fatalf("reason: %q", Reason(err))
	}
	if HasReason(err, agentv1.ErrorReason_ERROR_REASON_SESSION_NOT_FOUND) {
		t.Fatal("matched another reason")
	}
	if !errors.Is(FromError(err), ReasonError(agentv1.ErrorReason_ERROR_REASON_SESSION_BUSY)) {
		t.Fatal("errors.Is with ReasonError")
	}
	if errors.Is(FromError(err), ReasonError(agentv1.ErrorReason_ERROR_REASON_NO_API_KEY)) {
		t.Fatal("errors.Is matched another reason")
	}
	if got := Fields(err); fmt.Sprint(got) != "[input[0] options.busy_policy]" {
		t.Fatalf("fields: %v", got)
	}
	if Reason(nil) != "" || FromError(nil) != nil || Fields(nil) != nil || HasReason(nil, 0) {
		t.Fatal("nil error")
	}
	plain := FromError(errors.New("boom"))
	if plain.Code != codes.Unknown || plain.Reason != "" || plain.Metadata == nil {
		t.Fatalf("plain error: %+v", plain)
	}
}

func TestFromStatus(t *testing.T) {
	if FromStatus(nil) != nil || FromStatus(status.New(codes.OK, "").Proto()) != nil {
		t.Fatal("OK status decoded as an error")
	}
	e := FromStatus(status.Convert(richError(t)).Proto())
	if e.Reason != "SESSION_BUSY" || len(e.FieldViolations) != 2 {
		t.Fatalf("%+v", e)
	}
	cmd := &CommandError{CommandID: "turn", Err: e}
	if Reason(cmd) != "SESSION_BUSY" || status.Code(FromError(cmd)) != codes.FailedPrecondition {
		t.Fatalf("through CommandError: %q", Reason(cmd))
	}
}
