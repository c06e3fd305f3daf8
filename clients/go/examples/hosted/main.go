// Command hosted is an example host built on package agent: it creates a
// coding session whose `write` calls need approval and which declares the
// hosted tool `lookup`, runs one turn with agent.Client.Run (approving every
// request, answering lookups), prints what happened, and shows the error
// helpers on a session that does not exist.
//
//	go run ./examples/hosted -addr 127.0.0.1:50051 -prompt "Look up Go, then write notes.txt"
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/general-agent/general-agent/clients/go/agent"
	agentv1 "github.com/general-agent/general-agent/clients/go/gen/general_agent/v1"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "server address host:port")
	prompt := flag.String("prompt", "Look up Go, then write notes.txt", "the user message")
	flag.Parse()
	log.SetFlags(0)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client, err := agent.Dial(*addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	created, err := client.CreateSession(ctx, &agentv1.CreateSessionRequest{Session: &agentv1.Session{
		Identity:       &agentv1.SessionIdentity{Mode: agentv1.SessionMode_SESSION_MODE_CODING},
		ApprovalPolicy: &agentv1.ApprovalPolicy{Entries: []string{"write"}},
		HostedTools: []*agentv1.HostedToolDefinition{{
			Name:            "lookup",
			Description:     "Looks a word up in the host's dictionary.",
			InputSchemaJson: `{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`,
		}},
	}})
	if err != nil {
		log.Fatalf("CreateSession: %v", agent.FromError(err))
	}
	sessionID := created.GetSession().GetIdentity().GetSessionId()
	fmt.Println("session", sessionID)

	lookup := func(ctx context.Context, call *agentv1.HostedToolCallEvent) (any, error) {
		var input struct {
			Q string `json:"q"`
		}
		if err := json.Unmarshal([]byte(call.GetInputJson()), &input); err != nil {
			return nil, err // the model sees an error result
		}
		fmt.Printf("hosted: lookup %s\n", input.Q)
		return map[string]string{"word": input.Q, "meaning": "a programming language"}, nil
	}
	approve := func(ctx context.Context, request *agentv1.ApprovalRequestedEvent) agent.Decision {
		fmt.Printf("approval: %s %s\n", request.GetTitle(), request.GetInputJson())
		return agent.Approve()
	}

	var text strings.Builder
	outcome := agentv1.RunOutcome_RUN_OUTCOME_UNSPECIFIED
	for ev, err := range client.Run(ctx, sessionID, []*agentv1.ContentPart{agent.Text(*prompt)}, agent.RunOptions{
		Hosted:     map[string]agent.HostedFunc{"lookup": lookup},
		OnApproval: approve,
	}) {
		if err != nil {
			log.Fatalf("run: %v", err)
		}
		switch body := ev.GetEvent().(type) {
		case *agentv1.SessionEvent_AssistantDelta:
			text.WriteString(body.AssistantDelta.GetText())
		case *agentv1.SessionEvent_ToolResult:
			fmt.Printf("tool_result: %s\n", body.ToolResult.GetToolName())
		case *agentv1.SessionEvent_ToolError:
			fmt.Printf("tool_error: %s: %s\n", body.ToolError.GetToolName(), body.ToolError.GetError())
		case *agentv1.SessionEvent_RunFinished:
			outcome = body.RunFinished.GetOutcome()
		}
	}
	fmt.Println("text:", text.String())
	fmt.Println("outcome:", outcome)

	// The error helpers: code, ErrorInfo reason and metadata of a failed call.
	_, err = client.GetSession(ctx, &agentv1.GetSessionRequest{SessionId: "no-such-session"})
	if e := agent.FromError(err); e != nil {
		fmt.Printf("error: %s %s\n", e.Code, e.Reason)
	}
	if outcome != agentv1.RunOutcome_RUN_OUTCOME_COMPLETED {
		os.Exit(1)
	}
}
