from general_agent_server.cli import main

raise SystemExit(main())
