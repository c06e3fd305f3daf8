// Command smoke is a minimal end-to-end check of the General Agent Service
// through the generated Go client: it creates a session, streams one turn and
// prints the assistant text and the run outcome.
//
// Output (stdout):
//
//	session <id>
//	text: <concatenated assistant_delta text>
//	outcome: <RunOutcome enum name>
//
// Exit codes: 0 on success, 1 on any RPC error (status printed to stderr),
// 2 when the stream ends without a run_finished event, 64 on bad usage.
package main

import (
	"context"
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
	flag.Parse()
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "smoke: -addr host:port is required")
		flag.Usage()
		return 64
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

	created, err := client.CreateSession(ctx, &agentv1.CreateSessionRequest{
		Session: &agentv1.Session{
			Identity: &agentv1.SessionIdentity{
				Mode:       agentv1.SessionMode_SESSION_MODE_GENERAL,
				SessionKey: "go-smoke",
			},
		},
	})
	if err != nil {
		return rpcError("CreateSession", err)
	}
	sessionID := created.GetSession().GetIdentity().GetSessionId()
	fmt.Printf("session %s\n", sessionID)

	stream, err := client.StreamTurn(ctx, &agentv1.StreamTurnRequest{
		SessionId: sessionID,
		Input: []*agentv1.ContentPart{{
			Part: &agentv1.ContentPart_Text{Text: &agentv1.TextPart{Text: *prompt}},
		}},
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
