from app.server.cli import main

main()
