from engine.cli.main.main import main

main()
