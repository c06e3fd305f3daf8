// Command smoke is a minimal end-to-end check of the General Agent Service
// through the generated Go client: it creates a session, streams one turn and
// prints the assistant text and the run outcome.
//
// With -approve (approval_policy entries) or -hosted (a hosted tool to
// declare), the turn runs over RunSession instead of StreamTurn, and the
// program answers every approval_requested with APPROVE (a resolve_approval
// command) and every hosted_tool_call with the JSON output
// {"answered_by":"go-smoke","tool":<name>,"input":<input>} (a hosted_result
// command), until the run's terminal run_finished.
//
// Output (stdout):
//
//	session <id>
//	approval: <tool> <call_id> <title>     (RunSession mode, once per request)
//	hosted: <tool> <call_id> <input_json>  (RunSession mode, once per call)
//	text: <concatenated assistant_delta text>
//	outcome: <RunOutcome enum name>
//
// Exit codes: 0 on success, 1 on any RPC error or refused command (status
// printed to stderr), 2 when the stream ends without a (terminal)
// run_finished event, 64 on bad usage.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	agentv1 "github.com/general-agent/general-agent/clients/go/gen/general_agent/v1"
)

const overallTimeout = 30 * time.Second

func main() {
	os.Exit(run())
}

func run() int {
	addr := flag.String("addr", "", "server address host:port (required)")
	prompt := flag.String("prompt", "Say hello", "the user message of the turn")
	mode := flag.String("mode", "general", "session mode: general or coding")
	approve := flag.String("approve", "", "comma-separated approval_policy entries (e.g. write or mutating); implies RunSession")
	hosted := flag.String("hosted", "", "name of a hosted tool to declare and answer; implies RunSession")
	flag.Parse()
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "smoke: -addr host:port is required")
		flag.Usage()
		return 64
	}
	sessionMode := agentv1.SessionMode_SESSION_MODE_GENERAL
	switch *mode {
	case "general":
	case "coding":
		sessionMode = agentv1.SessionMode_SESSION_MODE_CODING
	default:
		fmt.Fprintf(os.Stderr, "smoke: -mode must be general or coding, not %q\n", *mode)
		return 64
	}
	session := &agentv1.Session{
		Identity: &agentv1.SessionIdentity{Mode: sessionMode, SessionKey: "go-smoke"},
	}
	if *approve != "" {
		session.ApprovalPolicy = &agentv1.ApprovalPolicy{Entries: strings.Split(*approve, ",")}
	}
	if *hosted != "" {
		session.HostedTools = []*agentv1.HostedToolDefinition{{
			Name:            *hosted,
			Description:     "Answered by the Go smoke program.",
			InputSchemaJson: `{"type":"object","properties":{"q":{"type":"string"}}}`,
		}}
	}

	ctx, cancel := context.WithTimeout(context.Background(), overallTimeout)
	defer cancel()

	// grpc.NewClient does not connect eagerly; the first RPC connects and
	// fails (UNAVAILABLE) or runs into the context deadline, never blocking
	// past it.
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "smoke: dial %s: %v\n", *addr, err)
		return 1
	}
	defer conn.Close()

	client := agentv1.NewAgentServiceClient(conn)

	created, err := client.CreateSession(ctx, &agentv1.CreateSessionRequest{Session: session})
	if err != nil {
		return rpcError("CreateSession", err)
	}
	sessionID := created.GetSession().GetIdentity().GetSessionId()
	fmt.Printf("session %s\n", sessionID)
	input := []*agentv1.ContentPart{{
		Part: &agentv1.ContentPart_Text{Text: &agentv1.TextPart{Text: *prompt}},
	}}
	if *approve != "" || *hosted != "" {
		return runSession(ctx, client, sessionID, input)
	}

	stream, err := client.StreamTurn(ctx, &agentv1.StreamTurnRequest{
		SessionId: sessionID,
		Input:     input,
	})
	if err != nil {
		return rpcError("StreamTurn", err)
	}

	var text strings.Builder
	var finished *agentv1.RunFinishedEvent
	for finished == nil {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return rpcError("StreamTurn", err)
		}
		switch ev := resp.GetEvent().GetEvent().(type) {
		case *agentv1.SessionEvent_AssistantDelta:
			text.WriteString(ev.AssistantDelta.GetText())
		case *agentv1.SessionEvent_RunFinished:
			finished = ev.RunFinished
		default:
			// Other (and unknown future) event variants are skipped.
		}
	}

	fmt.Printf("text: %s\n", text.String())
	if finished == nil {
		fmt.Fprintln(os.Stderr, "smoke: stream ended without run_finished")
		return 2
	}
	fmt.Printf("outcome: %s\n", finished.GetOutcome().String())
	return 0
}

// runSession runs one turn over RunSession, answering approvals (APPROVE)
// and hosted calls as they arrive, and prints as the StreamTurn path does.
func runSession(ctx context.Context, client agentv1.AgentServiceClient, sessionID string, input []*agentv1.ContentPart) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream if we return early
	stream, err := client.RunSession(ctx)
	if err != nil {
		return rpcError("RunSession", err)
	}
	send := func(req *agentv1.RunSessionRequest) error {
		if err := stream.Send(req); err != nil {
			// The real status comes from Recv once Send fails with io.EOF.
			_, recvErr := stream.Recv()
			return errors.Join(err, recvErr)
		}
		return nil
	}
	if err := send(&agentv1.RunSessionRequest{Command: &agentv1.RunSessionRequest_Attach{
		Attach: &agentv1.RunSessionAttach{SessionId: sessionID},
	}}); err != nil {
		return rpcError("RunSession attach", err)
	}
	if err := send(&agentv1.RunSessionRequest{Command: &agentv1.RunSessionRequest_Turn{
		Turn: &agentv1.RunSessionTurn{CommandId: "turn", Input: input},
	}}); err != nil {
		return rpcError("RunSession turn", err)
	}

	var text strings.Builder
	var finished *agentv1.RunFinishedEvent
	commands := 0
	for finished == nil {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return rpcError("RunSession", err)
		}
		switch r := resp.GetResponse().(type) {
		case *agentv1.RunSessionResponse_CommandResult:
			if st := r.CommandResult.GetStatus(); st.GetCode() != 0 {
				return rpcError("RunSession command "+r.CommandResult.GetCommandId(), status.ErrorProto(st))
			}
		case *agentv1.RunSessionResponse_Event:
			switch ev := r.Event.GetEvent().(type) {
			case *agentv1.SessionEvent_AssistantDelta:
				text.WriteString(ev.AssistantDelta.GetText())
			case *agentv1.SessionEvent_ApprovalRequested:
				asked := ev.ApprovalRequested
				fmt.Printf("approval: %s %s %s\n", asked.GetToolName(), asked.GetCallId(), asked.GetTitle())
				commands++
				if err := send(&agentv1.RunSessionRequest{Command: &agentv1.RunSessionRequest_ResolveApproval{
					ResolveApproval: &agentv1.RunSessionResolveApproval{
						CommandId: fmt.Sprintf("approve-%d", commands),
						CallId:    asked.GetCallId(),
						Decision:  agentv1.ApprovalDecision_APPROVAL_DECISION_APPROVE,
					},
				}}); err != nil {
					return rpcError("RunSession resolve_approval", err)
				}
			case *agentv1.SessionEvent_HostedToolCall:
				call := ev.HostedToolCall
				fmt.Printf("hosted: %s %s %s\n", call.GetToolName(), call.GetCallId(), call.GetInputJson())
				output, err := json.Marshal(map[string]any{
					"answered_by": "go-smoke",
					"tool":        call.GetToolName(),
					"input":       json.RawMessage(call.GetInputJson()),
				})
				if err != nil {
					fmt.Fprintf(os.Stderr, "smoke: hosted call %s: bad input_json: %v\n", call.GetCallId(), err)
					return 1
				}
				commands++
				if err := send(&agentv1.RunSessionRequest{Command: &agentv1.RunSessionRequest_HostedResult{
					HostedResult: &agentv1.RunSessionHostedResult{
						CommandId: fmt.Sprintf("hosted-%d", commands),
						CallId:    call.GetCallId(),
						Result:    &agentv1.RunSessionHostedResult_OutputJson{OutputJson: string(output)},
					},
				}}); err != nil {
					return rpcError("RunSession hosted_result", err)
				}
			case *agentv1.SessionEvent_RunFinished:
				if ev.RunFinished.GetOutcome() != agentv1.RunOutcome_RUN_OUTCOME_SUSPENDED {
					finished = ev.RunFinished
				}
			default:
				// Other (and unknown future) event variants are skipped.
			}
		default:
			// Heartbeats and unknown future responses are skipped.
		}
	}
	// Half-close: the server ends the stream once the runs we started are finished.
	_ = stream.CloseSend()
	for {
		if _, err := stream.Recv(); err != nil {
			break
		}
	}

	fmt.Printf("text: %s\n", text.String())
	if finished == nil {
		fmt.Fprintln(os.Stderr, "smoke: stream ended without a terminal run_finished")
		return 2
	}
	fmt.Printf("outcome: %s\n", finished.GetOutcome().String())
	return 0
}

// rpcError prints the gRPC status of err (code, message and the ErrorInfo
// reason from the status details, if any) to stderr and returns exit code 1.
func rpcError(rpc string, err error) int {
	st := status.Convert(err)
	reason := ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason = info.GetReason()
			break
		}
	}
	msg := fmt.Sprintf("smoke: %s failed: code=%s message=%q", rpc, st.Code(), st.Message())
	if reason != "" {
		msg += " reason=" + reason
	}
	fmt.Fprintln(os.Stderr, msg)
	return 1
}
