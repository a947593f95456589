from gcp.cli import main

main()
