// Command hookhost is a minimal remote hook host for the General Agent
// Service: it serves general_agent.v1.HookService, blocks every call of the
// tool "read" in before_tool_call, registers itself with the agent server
// (RegisterHooks, plugin "go-host") and serves until it is signalled.
//
// Output (stdout):
//
//	address <host:port>   where HookService listens (printed before registering)
//	ready                 once RegisterHooks succeeded
//
// The agent server dials the printed address back, so it must reach it. The
// operator's hook hosts may be on loopback; a tenant-role caller's target must
// pass the server's SSRF guard (or be on GENERAL_AGENT_SSRF_ALLOW_HOSTS). Every
// hook other than before_tool_call answers UNIMPLEMENTED, which the server
// reads as "no opinion".
//
// On SIGINT or SIGTERM it unregisters (registrations persist on the server,
// and before_tool_call fails closed while its host is gone), stops and exits
// 0. Exit codes: 1 on a listen, serve or RegisterHooks failure, 64 on bad
// usage.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/general-agent/general-agent/clients/go/gen/general_agent/v1"
)

const (
	pluginID    = "go-host"
	blockedTool = "read"
	blockReason = "blocked by go host"
	hookTimeout = 5 * time.Second  // per before_tool_call call, sent in the registration
	rpcTimeout  = 10 * time.Second // for RegisterHooks and UnregisterHooks
)

// guard serves HookService; the embedded Unimplemented server answers every
// hook it does not override with UNIMPLEMENTED.
type guard struct {
	agentv1.UnimplementedHookServiceServer
}

func (guard) BeforeToolCall(_ context.Context, req *agentv1.BeforeToolCallRequest) (*agentv1.BeforeToolCallResponse, error) {
	tool := req.GetEvent().GetToolName()
	if tool != blockedTool {
		return &agentv1.BeforeToolCallResponse{}, nil // result unset: no opinion, the call proceeds
	}
	fmt.Fprintf(os.Stderr, "hookhost: blocking %s in session %s\n", tool, req.GetContext().GetSessionId())
	return &agentv1.BeforeToolCallResponse{
		Result: &agentv1.BeforeToolCallResult{Block: true, BlockReason: blockReason},
	}, nil
}

func main() {
	os.Exit(run())
}

func run() int {
	addr := flag.String("addr", "", "agent server address host:port (required)")
	listen := flag.String("listen", "127.0.0.1:0", "HookService listen address (port 0 = a free port)")
	flag.Parse()
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "hookhost: -addr host:port is required")
		flag.Usage()
		return 64
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "hookhost: listen %s: %v\n", *listen, err)
		return 1
	}
	srv := grpc.NewServer()
	agentv1.RegisterHookServiceServer(srv, guard{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer srv.Stop()
	target := lis.Addr().String()
	fmt.Printf("address %s\n", target)

	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "hookhost: dial %s: %v\n", *addr, err)
		return 1
	}
	defer conn.Close()
	client := agentv1.NewAgentServiceClient(conn)

	if err := register(ctx, client, target); err != nil {
		return rpcError("RegisterHooks", err)
	}
	fmt.Println("ready")

	select {
	case err := <-served:
		fmt.Fprintf(os.Stderr, "hookhost: serve: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	// The signal context is done; unregistering needs a fresh one.
	unregisterCtx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	if _, err := client.UnregisterHooks(unregisterCtx, &agentv1.UnregisterHooksRequest{PluginId: pluginID}); err != nil {
		rpcError("UnregisterHooks", err)
	}
	srv.GracefulStop()
	return 0
}

// register makes (or replaces) the tenant-wide registration of this host.
func register(ctx context.Context, client agentv1.AgentServiceClient, target string) error {
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	_, err := client.RegisterHooks(ctx, &agentv1.RegisterHooksRequest{
		Registration: &agentv1.HookRegistration{
			PluginId: pluginID,
			Target:   &agentv1.HookTarget{Address: target},
			Hooks: []*agentv1.HookBinding{{
				Name:    agentv1.HookName_HOOK_NAME_BEFORE_TOOL_CALL,
				Timeout: durationpb.New(hookTimeout),
			}},
		},
	})
	return err
}

// rpcError prints the gRPC status of err to stderr and returns exit code 1.
func rpcError(rpc string, err error) int {
	st := status.Convert(err)
	fmt.Fprintf(os.Stderr, "hookhost: %s failed: code=%s message=%q\n", rpc, st.Code(), st.Message())
	return 1
}
