from hub.cli import main

raise SystemExit(main())
